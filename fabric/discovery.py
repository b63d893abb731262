"""From what the parsers read (``fabric.ibdiags``) to what ``fabric.services.record_run``
takes: cables, ports found down, device names, GUIDs and port counters by port.

Used by the collector (``fabric.tasks``) and by the upload of tool output collected
elsewhere (``POST /api/fabric/discoveries/``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .validation import Port, Seen, SeenLink

if TYPE_CHECKING:
    from .ibdiags import IbTopology, PortCounters

DOWN = "Down"


def _state(topology: IbTopology, guid: str, port: int) -> tuple[str, str] | None:
    state = topology.ports.get((guid, port))
    return (state.state, state.phys_state) if state is not None else None


def seen_from_topology(
    topology: IbTopology, counters: Iterable[PortCounters] | None = None
) -> tuple[Seen, dict[Port, dict[str, int]] | None, dict[str, str]]:
    """(what the run saw, counters by port or None when none were given, GUID by device name).

    A cable one of whose ports is reported Down is not a cable: ibnetdiscover (which lists
    cables, not states) may come from an earlier scan than iblinkinfo, which saw the port
    go down; the Down end counts as a down port. Switch port 0 (management) is skipped.
    """
    devices = topology.devices
    seen = Seen(devices={d.name for d in devices.values()})
    linked: set[tuple[str, int]] = set()
    for link in topology.links:
        ends = ((link.a_guid, link.a_port), (link.b_guid, link.b_port))
        states = [_state(topology, g, p) for g, p in ends]
        if any(s is not None and s[0] == DOWN for s in states):
            continue  # reported down below, as a port with no peer
        linked.update(ends)
        seen.links.append(
            SeenLink(
                Port(devices[link.a_guid].name, link.a_port),
                Port(devices[link.b_guid].name, link.b_port),
                link.width,
                link.rate_gbps,
                state=link.state,
                phys_state=link.phys_state,
            )
        )
    for (guid, port), state in sorted(topology.ports.items()):
        if port == 0 or (guid, port) in linked or state.state != DOWN or guid not in devices:
            continue
        seen.down_ports[Port(devices[guid].name, port)] = f"{state.state}/{state.phys_state}"
    guids = {d.name: d.guid for d in devices.values()}
    return seen, (counters_by_port(topology, counters) if counters is not None else None), guids


def counters_by_port(topology: IbTopology, counters: Iterable[PortCounters]) -> dict[Port, dict[str, int]]:
    """Counters keyed by Port; several outputs for one port are merged (later ones win per counter).
    Port 0 and ALL_PORTS (a device's ports summed) are not a cable's end and are left out."""
    from .ibdiags import ALL_PORTS

    result: dict[Port, dict[str, int]] = {}
    for entry in counters:
        device = topology.devices.get(entry.guid)
        if device is None or entry.port in (0, ALL_PORTS):
            continue
        result.setdefault(Port(device.name, entry.port), {}).update(entry.counters)
    return result


# --- Uploads ----------------------------------------------------------------------------------


class DiscoveryParseError(ValueError):
    """Uploaded tool output that cannot be read; ``errors``: [{"tool", "line", "message"}]."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{e['tool']}: line {e['line']}: {e['message']}" for e in errors))


@dataclass
class Upload:
    seen: Seen
    counters: dict[Port, dict[str, int]]
    guids: dict[str, str]
    outputs: dict[str, str]


def _refuse(tool: str, exc: Exception) -> DiscoveryParseError:
    line = getattr(exc, "line_no", 0)
    text = getattr(exc, "line", "")
    message = getattr(exc, "reason", None) or str(exc)
    return DiscoveryParseError(
        [{"tool": tool, "line": line, "message": message + (f": {text[:200]!r}" if text else "")}]
    )


def _perfquery_lids(text: str) -> list[tuple[int, int]]:
    """(line number, LID) of each '# Port counters: Lid N port P' header: perfquery names the
    device by LID only (the parser has already checked the headers' shape)."""
    return [
        (n, int(line.split(":", 1)[1].split()[1]))
        for n, line in enumerate(text.splitlines(), 1)
        if line.startswith("# Port")
    ]


def _perfquery(texts: Sequence[str], topology: IbTopology) -> list[PortCounters]:
    from dataclasses import replace

    from .ibdiags import IbParseError, parse_perfquery_blocks

    # A CA's LID is its first port's; a switch's covers all its ports.
    by_lid = {d.lid: d.guid for d in topology.devices.values() if d.lid}
    result = []
    for i, text in enumerate(texts):
        tool = f"perfquery[{i}]"
        try:
            blocks = parse_perfquery_blocks(text)
        except IbParseError as exc:
            raise _refuse(tool, exc) from None
        for (n, lid), block in zip(_perfquery_lids(text), blocks, strict=True):
            if lid not in by_lid:
                raise DiscoveryParseError(
                    [{"tool": tool, "line": n, "message": f"LID {lid} is not on the fabric ibnetdiscover saw"}]
                )
            result.append(replace(block, guid=by_lid[lid]))
    return result


def parse_upload(texts: Mapping[str, Any]) -> Upload:
    """Read uploaded ibnetdiscover, iblinkinfo and optional perfquery (a list) and ibqueryerrors
    output into a run's input; DiscoveryParseError names the tool and line of the first bad one."""
    from .ibdiags import (
        IbMergeError,
        IbParseError,
        merge,
        parse_iblinkinfo,
        parse_ibnetdiscover,
        parse_ibqueryerrors,
        resolve_counters,
    )

    parsed = {}
    for tool, parser in (("ibnetdiscover", parse_ibnetdiscover), ("iblinkinfo", parse_iblinkinfo)):
        try:
            parsed[tool] = parser(texts[tool])
        except IbParseError as exc:
            raise _refuse(tool, exc) from None
    try:
        topology = merge(parsed["ibnetdiscover"], parsed["iblinkinfo"])
    except IbMergeError as exc:
        raise _refuse("iblinkinfo", exc) from None
    counters = _perfquery(texts.get("perfquery") or [], topology)
    if texts.get("ibqueryerrors"):
        try:
            counters += resolve_counters(parse_ibqueryerrors(texts["ibqueryerrors"]), topology)
        except (IbParseError, IbMergeError) as exc:
            raise _refuse("ibqueryerrors", exc) from None
    seen, by_port, guids = seen_from_topology(topology, counters)
    outputs = {tool: texts[tool] for tool in ("ibnetdiscover", "iblinkinfo", "ibqueryerrors") if texts.get(tool)}
    outputs.update({f"perfquery[{i}]": text for i, text in enumerate(texts.get("perfquery") or [])})
    return Upload(seen=seen, counters=by_port or {}, guids=guids, outputs=outputs)
