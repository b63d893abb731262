"""Parsers for what infiniband-diags prints: ``ibnetdiscover``, ``iblinkinfo``, ``perfquery``
and ``ibqueryerrors`` (rdma-core's infiniband-diags 44+; captured samples in
tests/fabric/fixtures/). Plain dataclasses, no Django: the collector, the simulator
harness, the topology generator and the benchmark use them as they are.

Every parser reads line by line with string methods (no regular expressions, so no
backtracking) and fails loudly: malformed, truncated or unknown lines raise
``IbParseError`` with the line number and the line, never a partial result. A 2,000-host
fabric (16,756 devices, 32,128 cables: 165k lines of ibnetdiscover, 81k of iblinkinfo)
parses in ~0.5 s per output and merges in ~0.15 s on one core (test_topology.py times it).

GUIDs are normalised to "0x" + 16 lower-case hex digits. Devices are keyed by *node*
GUID. The tools also print *port* GUIDs (iblinkinfo's CA lines, ibqueryerrors' error
lines, ibnetdiscover's ``(guid)`` columns); ``IbTopology.port_guids`` maps those back.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

# Per-lane rate in Gb/s, as iblinkinfo prints it (libibmad's mad_dump_linkspeed[ext]);
# ibnetdiscover prints the IBTA name instead. FDR10 is printed "10.0 Gbps (FDR10)".
LANE_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0625,
    "EDR": 25.78125,
    "HDR": 53.125,
    "NDR": 106.25,
    "XDR": 212.5,
}
SPEED_NAME = {
    2.5: "SDR",
    5.0: "DDR",
    10.0: "QDR",
    14.0625: "FDR",
    25.78125: "EDR",
    53.125: "HDR",
    106.25: "NDR",
    212.5: "XDR",
}
LANES = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
PORT_STATES = ("Down", "Initialize", "Armed", "Active")
PHYS_STATES = ("Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "PhyTest")
# ibnetdiscover lists a cable but not its state: such a port is up at the physical layer
# (the scan crossed it) and somewhere between Initialize and Active.
UNKNOWN = "Unknown"
ALL_PORTS = 255  # perfquery -a: counters summed over the device's ports, not one port

# IBTA PortCounters names -> the snake_case names sysfs uses (…/ports/N/counters/); the
# agent reads those, so both sources land in the same keys.
COUNTER_NAMES = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "vl15_dropped",
    "QP1Dropped": "qp1_dropped",
    "PortXmitWait": "port_xmit_wait",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
}
IBTA_COUNTER_NAMES = {snake: ibta for ibta, snake in COUNTER_NAMES.items()}
_NOT_COUNTERS = {"PortSelect", "CounterSelect", "CounterSelect2"}


class IbParseError(ValueError):
    """Output a parser cannot read in full: names the tool, the line number and the line."""

    def __init__(self, tool: str, line_no: int, line: str, reason: str) -> None:
        self.tool, self.line_no, self.line, self.reason = tool, line_no, line, reason
        where = f"line {line_no}: " if line_no else ""
        shown = f": {line[:200]!r}" if line else ""
        super().__init__(f"{tool}: {where}{reason}{shown}")


class IbMergeError(ValueError):
    """Two outputs that cannot describe the same fabric (e.g. a port cabled to two peers)."""


@dataclass(frozen=True)
class IbDevice:
    """A switch or a channel adapter (HCA) as the fabric sees it."""

    guid: str  # node GUID, "0x0002c90300001000"
    kind: str  # "switch", "ca" (or "router")
    name: str  # node description: "leaf01"; an HCA "gpu-node-01 mlx5_0"
    ports: int
    lid: int | None = None  # a switch's LID, an HCA's first port's; None when unassigned (0)


@dataclass(frozen=True)
class IbPortState:
    """One port's link state as the tools saw it."""

    guid: str
    port: int
    state: str  # "Active", "Down", "Initialize", "Armed" (ibnetdiscover alone: "Unknown")
    phys_state: str  # "LinkUp", "Polling", "Disabled", ...
    width: str | None  # "4X"; None when down
    speed_gbps: float | None  # per lane, e.g. 53.125 (HDR)
    rate_gbps: float | None  # lanes x per-lane rate, e.g. 212.5


@dataclass(frozen=True)
class IbLink:
    """One cable as discovered, both ends; ``a`` is the end with the smaller (guid, port)."""

    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    width: str | None
    speed_gbps: float | None
    rate_gbps: float | None
    state: str
    phys_state: str

    @property
    def ends(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return (self.a_guid, self.a_port), (self.b_guid, self.b_port)


@dataclass
class IbTopology:
    """Devices, cables and port states of one look at the fabric."""

    devices: dict[str, IbDevice] = field(default_factory=dict)  # by node GUID
    links: list[IbLink] = field(default_factory=list)  # sorted, each cable once
    ports: dict[tuple[str, int], IbPortState] = field(default_factory=dict)  # every port reported
    port_guids: dict[str, tuple[str, int]] = field(default_factory=dict)  # port GUID -> (node GUID, port)

    def endpoint_name(self, guid: str, port: int) -> str:
        """ "leaf01/3", "gpu-node-01 mlx5_0/1": how plans and tickets name a port."""
        return f"{self.devices[guid].name}/{port}"

    def device_guid(self, guid: str) -> str | None:
        """The node GUID for a node or port GUID the tools printed, None if not on this fabric."""
        if guid in self.devices:
            return guid
        found = self.port_guids.get(guid)
        return found[0] if found else None

    def peers(self) -> dict[tuple[str, int], tuple[str, int]]:
        """(guid, port) -> the (guid, port) at the cable's other end, both directions."""
        result = {}
        for x in self.links:
            a, b = (x.a_guid, x.a_port), (x.b_guid, x.b_port)
            result[a], result[b] = b, a
        return result

    def by_name(self) -> dict[str, IbDevice]:
        return {d.name: d for d in self.devices.values()}


@dataclass(frozen=True)
class PortCounters:
    """One port's counters, under sysfs's names (``COUNTER_NAMES``); only those reported."""

    guid: str
    port: int
    counters: dict[str, int]


# --- helpers ----------------------------------------------------------------------------------


def normalize_guid(text: str) -> str:
    """ "0x2c90300001002", "2c90300001002" -> "0x0002c90300001002"; ValueError if not hex."""
    value = int(text, 16)
    if not 0 < value < 1 << 64:
        raise ValueError(f"GUID out of range: {text}")
    return f"0x{value:016x}"


class _Guids(dict[str, str]):
    """normalize_guid with memory: a fabric names each switch on hundreds of lines."""

    def __missing__(self, text: str) -> str:
        value = self[text] = normalize_guid(text)
        return value


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _no_gc(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Pause the cyclic GC while a parser builds ~10^5 objects none of which form cycles:
    otherwise collections triggered by the allocations cost a third of the time."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return wrapper


def rate(width: str | None, speed_gbps: float | None) -> float | None:
    if width is None or speed_gbps is None or width not in LANES:
        return None
    return LANES[width] * speed_gbps


def counter_name(ibta: str) -> str:
    """sysfs name of an IBTA counter; names outside the table go CamelCase -> snake_case."""
    known = COUNTER_NAMES.get(ibta)
    if known:
        return known
    out = []
    for i, ch in enumerate(ibta):
        if ch.isupper() and i and (not ibta[i - 1].isupper() or (i + 1 < len(ibta) and ibta[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _reason(exc: Exception) -> str:
    text = str(exc)
    # str.index's "substring not found": a separator the format always has is missing
    return "unreadable line (cut short, or not this tool's format)" if not text or "substring" in text else text


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(text.splitlines(), 1):
        yield n, line.rstrip("\r")


def _worse(a: str, b: str) -> str:
    """A cable is as up as its less-up end (Down < Initialize < Armed < Active)."""
    order = {s: i for i, s in enumerate(PORT_STATES)}
    return a if order.get(a, -1) <= order.get(b, -1) else b


class _Links:
    """Cables seen from their ends: each must be seen from both, and a port has one peer."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.peer: dict[tuple[str, int], tuple[str, int]] = {}
        # (a, b) -> [times seen, line no, line, width, speed, state, phys] of the first sighting
        self.seen: dict[tuple[tuple[str, int], tuple[str, int]], list[Any]] = {}

    def add(
        self,
        n: int,
        line: str,
        here: tuple[str, int],
        there: tuple[str, int],
        width: str | None,
        speed: float | None,
        state: str,
        phys: str,
    ) -> None:
        known = self.peer.setdefault(here, there)
        if known != there:
            raise IbParseError(self.tool, n, line, f"port {here[0]}/{here[1]} is cabled to two ports")
        key = (here, there) if here <= there else (there, here)
        entry = self.seen.get(key)
        if entry is None:
            self.seen[key] = [1, n, line, width, speed, state, phys]
        else:
            entry[0] += 1
            if entry[5] != state:
                entry[5] = _worse(entry[5], state)

    def done(self) -> list[IbLink]:
        links = []
        for key in sorted(self.seen):
            count, n, line, width, speed, state, phys = self.seen[key]
            if count != 2 and key[0] != key[1]:
                raise IbParseError(self.tool, n, line, "cable listed from one end only (output truncated?)")
            (ag, ap), (bg, bp) = key
            links.append(IbLink(ag, ap, bg, bp, width, speed, rate(width, speed), state, phys))
        return links


# --- ibnetdiscover ----------------------------------------------------------------------------

_ND_KINDS = {"Switch": "switch", "Ca": "ca", "Rt": "router"}
_ND_IGNORED = ("vendid=", "devid=", "sysimgguid=")


@dataclass
class _NdRecord:
    guid: str
    kind: str
    name: str
    ports: int
    lid: int | None


def _quoted(text: str, start: int = 0) -> tuple[str, int]:
    """The "..." at or after ``start`` and the index after its closing quote."""
    i = text.index('"', start)
    j = text.index('"', i + 1)
    return text[i + 1 : j], j + 1


def _node_id_guid(node_id: str, guids: _Guids) -> str:
    """ "S-0002c90300001002" -> ("0x0002c90300001002"): ibnetdiscover names nodes by GUID."""
    if len(node_id) < 3 or node_id[1] != "-" or node_id[0] not in "SHR":
        raise ValueError(f"not an ibnetdiscover node id: {node_id!r}")
    return guids[node_id[2:]]


def _nd_width_speed(token: str) -> tuple[str | None, float | None]:
    """ "4xHDR" -> ("4X", 53.125); "??" / "???" (not reported) -> None."""
    lanes, sep, name = token.partition("x")
    width = f"{lanes}X" if sep and f"{lanes}X" in LANES else None
    return width, LANE_GBPS.get(name) if sep else None


def _nd_remote_comment(comment: str) -> tuple[str, int, str | None, float | None]:
    """'"leaf02" lid 4 4xHDR[ s=.. w=.. v=..]' -> (name, lid, width, speed)."""
    start = comment.index('"')
    end = comment.rindex('" lid ')
    name = comment[start + 1 : end]
    tokens = comment[end + 2 :].split()
    lid = int(tokens[1])
    width, speed = _nd_width_speed(tokens[2])
    return name, lid, width, speed


@_no_gc
def parse_ibnetdiscover(text: str) -> IbTopology:
    """Devices and cables from ``ibnetdiscover`` (default format; not ``-g``/``-l``/``-p``).

    Each cable is printed from both ends and appears once here; width and per-lane speed
    come from the ``# "..." lid N 4xHDR`` comments. Ports carry state "Unknown": the tool
    lists cables, not their state (``merge`` adds iblinkinfo's)."""
    tool = "ibnetdiscover"
    records: dict[str, _NdRecord] = {}
    ports: dict[tuple[str, int], IbPortState] = {}
    port_guids: dict[str, tuple[str, int]] = {}
    links = _Links(tool)
    guids = _Guids()
    current: _NdRecord | None = None
    pending_port_guid: str | None = None
    remote_refs: list[tuple[int, str, str]] = []
    for n, line in _lines(text):
        try:
            if not line.strip():
                current = None
            elif line[0] == "#":
                continue
            elif line[0] == "[":
                if current is None:
                    raise ValueError("port line outside a node record")
                _nd_port(line, n, current, ports, port_guids, links, remote_refs, guids)
            elif line.startswith(_ND_IGNORED):
                continue
            elif line.startswith(("switchguid=", "caguid=", "rtguid=")):
                value = line.split("=", 1)[1]
                node_part, _, port_part = value.partition("(")
                pending_port_guid = guids[port_part.rstrip(")")] if port_part else None
                guids[node_part]  # normalize_guid raises unless it is a GUID
            else:
                current = _nd_node(line, records, guids)
                if pending_port_guid and current.kind == "switch":
                    port_guids[pending_port_guid] = (current.guid, 0)
                pending_port_guid = None
        except IbParseError:
            raise
        except (ValueError, IndexError) as exc:
            raise IbParseError(tool, n, line, _reason(exc)) from None
    if not records:
        raise IbParseError(tool, 0, "", "no node records (empty or not ibnetdiscover output)")
    for n, line, guid in remote_refs:
        if guid not in records:
            raise IbParseError(tool, n, line, f"cable to {guid}, which has no node record (output truncated?)")
    devices = {g: IbDevice(r.guid, r.kind, r.name, r.ports, r.lid) for g, r in records.items()}
    return IbTopology(devices=devices, links=links.done(), ports=ports, port_guids=port_guids)


def _nd_node(line: str, records: dict[str, _NdRecord], guids: _Guids) -> _NdRecord:
    word, _, rest = line.partition("\t")
    kind = _ND_KINDS.get(word)
    if kind is None:
        raise ValueError("unknown line (not ibnetdiscover's default format?)")
    count = int(rest.split(None, 1)[0])
    node_id, after = _quoted(rest)
    guid = _node_id_guid(node_id, guids)
    comment = rest[rest.index("#", after) + 1 :]
    name, end = _quoted(comment)
    lid = None
    if kind == "switch":  # '# "leaf02" base port 0 lid 4 lmc 0'
        tokens = comment[end:].split()
        lid = int(tokens[tokens.index("lid") + 1]) or None
    if guid in records:
        raise ValueError(f"node {guid} listed twice")
    record = _NdRecord(guid, kind, name, count, lid)
    records[guid] = record
    return record


def _nd_port(
    line: str,
    n: int,
    current: _NdRecord,
    ports: dict[tuple[str, int], IbPortState],
    port_guids: dict[str, tuple[str, int]],
    links: _Links,
    remote_refs: list[tuple[int, str, str]],
    guids: _Guids,
) -> None:
    close = line.index("]")
    port = int(line[1:close])
    rest = line[close + 1 :]
    if rest.startswith("("):  # a CA's own port GUID: '[1](2c90300002009) '
        end = rest.index(")")
        port_guids[guids[rest[1:end]]] = (current.guid, port)
        rest = rest[end + 1 :]
    remote_id, after = _quoted(rest)
    remote = _node_id_guid(remote_id, guids)
    rest = rest[after:]
    remote_port = int(rest[1 : rest.index("]")])
    hash_at = rest.index("#")
    between = rest[:hash_at]
    if "(" in between:  # the far end is a CA: its port GUID
        guid_text = between[between.index("(") + 1 : between.index(")")]
        port_guids[guids[guid_text]] = (remote, remote_port)
    comment = rest[hash_at + 1 :].strip()
    if current.kind != "switch":  # '# lid 8 lmc 0 "leaf02" lid 4 4xHDR'
        tokens = comment.split(None, 4)
        if tokens[0] != "lid" or tokens[2] != "lmc":
            raise ValueError("expected '# lid N lmc M' on a CA port line")
        if current.lid is None:
            current.lid = int(tokens[1]) or None
        comment = comment[comment.index('"') :]
    _, _, width, speed = _nd_remote_comment(comment)
    here, there = (current.guid, port), (remote, remote_port)
    ports[here] = IbPortState(current.guid, port, UNKNOWN, "LinkUp", width, speed, rate(width, speed))
    links.add(n, line, here, there, width, speed, UNKNOWN, "LinkUp")
    remote_refs.append((n, line, remote))


# --- iblinkinfo -------------------------------------------------------------------------------

_LI_KINDS = {"CA": "ca", "Switch": "switch", "Router": "router"}


@dataclass(slots=True)
class _LiPort:
    n: int
    line: str
    port_guid: str  # CA lines only: the port's GUID
    lid: int  # the device's LID (a switch) or the port's (a CA)
    port: int
    state: str
    phys: str
    width: str | None
    speed: float | None
    guid: str = ""  # the device, filled in by the caller
    peer_lid: int | None = None
    peer_port: int | None = None
    peer_name: str | None = None
    peer_guid: str | None = None


@_no_gc
def parse_iblinkinfo(text: str) -> IbTopology:
    """Port states, cables and devices from ``iblinkinfo`` (default format, not ``-l``/``-p``).

    A switch's GUID is in its header; a CA's header has only its name, so a CA is keyed by
    its first port's GUID (``merge`` maps it to the node GUID ibnetdiscover gives). The far
    end of a cable is printed as LID, port and name: it is found by LID, or by name where
    the LID is 0 (no SM) and the name is unique; anything else is an error."""
    tool = "iblinkinfo"
    devices: dict[str, IbDevice] = {}
    port_guids: dict[str, tuple[str, int]] = {}
    entries: list[_LiPort] = []
    by_lid: dict[int, str] = {}
    header: tuple[int, str, str, str] | None = None  # line no, line, kind, name
    current: str | None = None
    has_ports = True
    for n, line in _lines(text):
        if not line.strip():
            continue
        try:
            if line[0] != " ":
                if not has_ports and header is not None:
                    raise IbParseError(tool, header[0], header[1], "node header without port lines")
                kind, name, current = _li_header(line)
                header, has_ports = (n, line, kind, name), False
                if current is not None:
                    _li_add_device(devices, kind, name, current)
                continue
            if header is None:
                raise ValueError("port line before any node header")
            e = _li_port(line, n)
            if header[2] == "switch":
                if e.port_guid:
                    raise ValueError("a switch port line with a GUID column")
            else:
                if not e.port_guid:
                    raise ValueError("a CA port line without its port GUID")
                if current is None:
                    current = e.port_guid
                    _li_add_device(devices, header[2], header[3], current)
                port_guids[e.port_guid] = (current, e.port)
            assert current is not None  # noqa: S101 - type narrowing: a switch header always has a GUID, a CA port line sets it above
            e.guid, has_ports = current, True
            if e.lid and by_lid.setdefault(e.lid, current) != current:
                raise ValueError(f"LID {e.lid} is used by two devices")
            dev = devices[current]
            if e.port > dev.ports or (dev.lid is None and e.lid):
                devices[current] = IbDevice(
                    dev.guid, dev.kind, dev.name, max(dev.ports, e.port), dev.lid or e.lid or None
                )
            entries.append(e)
        except IbParseError:
            raise
        except (ValueError, IndexError) as exc:
            raise IbParseError(tool, n, line, _reason(exc)) from None
    if not has_ports and header is not None:
        raise IbParseError(tool, header[0], header[1], "node header without port lines (output truncated?)")
    if not devices:
        raise IbParseError(tool, 0, "", "no nodes (empty or not iblinkinfo output)")
    for guid, dev in devices.items():
        if dev.kind == "switch":
            port_guids[guid] = (guid, 0)
    return _li_assemble(tool, devices, entries, by_lid, port_guids)


def _li_header(line: str) -> tuple[str, str, str | None]:
    """'CA: gpu-node-01 mlx5_0:' or 'Switch: 0x0002c90300001002 leaf02:' -> (kind, name, guid)."""
    word, sep, rest = line.partition(": ")
    kind = _LI_KINDS.get(word)
    if kind is None or not sep or not rest.endswith(":"):
        raise ValueError("unknown line (not iblinkinfo's default format?)")
    rest = rest[:-1]
    guid = None
    if kind == "switch":
        guid_text, _, rest = rest.partition(" ")
        guid = normalize_guid(guid_text)
    return kind, rest, guid


def _li_add_device(devices: dict[str, IbDevice], kind: str, name: str, guid: str) -> None:
    if guid in devices:
        raise ValueError(f"node {guid} listed twice")
    devices[guid] = IbDevice(guid, kind, name, 0)


def _li_port(line: str, n: int) -> _LiPort:
    """'      0x0002c90300002009      8    1[  ] ==( 4X  53.125 Gbps Active/  LinkUp)==>  4  2[  ] "leaf02" (...)'"""
    i = line.index("==(")
    j = line.index(")==>", i)
    left = line[: line.rindex("[", 0, i)].split()
    if len(left) not in (2, 3):
        raise ValueError("expected '[port GUID] LID port[ext]' before the link")
    state, phys, width, speed = _li_link(line[i + 3 : j])
    entry = _LiPort(
        n,
        line,
        normalize_guid(left[0]) if len(left) == 3 else "",
        int(left[-2]),
        int(left[-1]),
        state,
        phys,
        width,
        speed,
    )
    right = line[j + 4 :].strip()
    if right.startswith("[") or right == '"Port not available"':
        return entry
    k = right.index("[")
    head = right[:k].split()
    if len(head) == 3:  # "Link info:" (ibqueryerrors -r) style: the far end's port GUID first
        entry.peer_guid = normalize_guid(head[0])
        head = head[1:]
    entry.peer_lid, entry.peer_port = int(head[0]), int(head[1])
    entry.peer_name = right[right.index('"', k) + 1 : right.rindex('" (')]
    return entry


def _li_link(inner: str) -> tuple[str, str, str | None, float | None]:
    """'( 4X        53.125 Gbps Active/  LinkUp)' or '(                Down/ Polling)'."""
    slash = inner.rindex("/")
    phys = inner[slash + 1 :].strip()
    tokens = inner[:slash].split()
    if not tokens:
        raise ValueError("no port state in the link column")
    state = tokens[-1]
    if state not in PORT_STATES and not state.startswith("?("):
        raise ValueError(f"unknown port state {state!r}")
    if phys not in PHYS_STATES and not phys.startswith("?("):
        raise ValueError(f"unknown physical state {phys!r}")
    if len(tokens) == 1:
        return state, phys, None, None
    width = tokens[0] if tokens[0] in LANES else None
    speed = float(tokens[tokens.index("Gbps") - 1]) if "Gbps" in tokens else None
    return state, phys, width, speed


def _li_assemble(
    tool: str,
    devices: dict[str, IbDevice],
    entries: list[_LiPort],
    by_lid: dict[int, str],
    port_guids: dict[str, tuple[str, int]],
) -> IbTopology:
    by_name: dict[str, list[str]] = {}
    for dev in devices.values():
        by_name.setdefault(dev.name, []).append(dev.guid)
    ports: dict[tuple[str, int], IbPortState] = {}
    links = _Links(tool)
    for e in entries:
        here = (e.guid, e.port)
        if here in ports:
            raise IbParseError(tool, e.n, e.line, f"port {e.port} listed twice")
        ports[here] = IbPortState(e.guid, e.port, e.state, e.phys, e.width, e.speed, rate(e.width, e.speed))
        if e.peer_port is None:
            continue
        peer = _li_peer(e, by_lid, by_name, port_guids, devices)
        if peer is None:
            raise IbParseError(
                tool,
                e.n,
                e.line,
                f"cannot tell which device the far end is: LID {e.peer_lid}, "
                f"name {e.peer_name!r} (output truncated, or no SM and "
                "duplicate names?)",
            )
        there = (peer, e.peer_port)
        links.add(e.n, e.line, here, there, e.width, e.speed, e.state, e.phys)
    return IbTopology(devices=devices, links=links.done(), ports=ports, port_guids=port_guids)


def _li_peer(
    e: _LiPort,
    by_lid: dict[int, str],
    by_name: dict[str, list[str]],
    port_guids: dict[str, tuple[str, int]],
    devices: dict[str, IbDevice],
) -> str | None:
    if e.peer_guid is not None:
        if e.peer_guid in devices:
            return e.peer_guid
        if e.peer_guid in port_guids:
            return port_guids[e.peer_guid][0]
    if e.peer_lid:
        found = by_lid.get(e.peer_lid)
        if found is not None and devices[found].name == e.peer_name:
            return found
    named = by_name.get(e.peer_name or "", [])
    return named[0] if len(named) == 1 else None


# --- merge ------------------------------------------------------------------------------------


@_no_gc
def merge(discovered: IbTopology, linkinfo: IbTopology) -> IbTopology:
    """The collector's full view: devices and cables from both, port states from iblinkinfo.

    iblinkinfo's CA keys (port GUIDs) become ibnetdiscover's node GUIDs. A port cabled to
    different peers in the two outputs raises ``IbMergeError`` (take both from one scan:
    the collector loads iblinkinfo from ibnetdiscover's cache)."""
    to_node: dict[str, str] = {}
    for port_guid, (node_guid, _port) in linkinfo.port_guids.items():
        if port_guid in discovered.port_guids:
            to_node[node_guid] = discovered.port_guids[port_guid][0]
    for guid in linkinfo.devices:
        to_node.setdefault(guid, guid)

    devices = dict(discovered.devices)
    for guid, dev in linkinfo.devices.items():
        node = to_node[guid]
        known = devices.get(node)
        if known is None:
            devices[node] = IbDevice(node, dev.kind, dev.name, dev.ports, dev.lid)
        elif dev.ports > known.ports or (known.lid is None and dev.lid is not None):
            devices[node] = IbDevice(
                node,
                known.kind,
                known.name,
                max(known.ports, dev.ports),
                known.lid if known.lid is not None else dev.lid,
            )
    ports = dict(discovered.ports)
    for (guid, port), st in linkinfo.ports.items():
        node = to_node[guid]
        ports[(node, port)] = (
            st
            if node == guid
            else IbPortState(node, port, st.state, st.phys_state, st.width, st.speed_gbps, st.rate_gbps)
        )
    peers = discovered.peers()
    links = {((x.a_guid, x.a_port), (x.b_guid, x.b_port)): x for x in discovered.links}
    for link in linkinfo.links:
        a, b = (to_node[link.a_guid], link.a_port), (to_node[link.b_guid], link.b_port)
        for here, there in ((a, b), (b, a)):
            got = peers.get(here)
            if got is not None and got != there:
                raise IbMergeError(
                    f"{_port_label(devices, here)} is cabled to {_port_label(devices, there)} in "
                    f"iblinkinfo but to {_port_label(devices, got)} in ibnetdiscover"
                )
        key = (a, b) if a <= b else (b, a)
        old = links.get(key)
        width, speed = link.width, link.speed_gbps
        if width is None and old is not None:
            width, speed = old.width, old.speed_gbps
        if key == ((link.a_guid, link.a_port), (link.b_guid, link.b_port)) and width == link.width:
            links[key] = link
        else:
            links[key] = IbLink(
                key[0][0],
                key[0][1],
                key[1][0],
                key[1][1],
                width,
                speed,
                rate(width, speed),
                link.state,
                link.phys_state,
            )
    port_guids = dict(discovered.port_guids)
    for port_guid, (node_guid, port) in linkinfo.port_guids.items():
        port_guids.setdefault(port_guid, (to_node[node_guid], port))
    return IbTopology(devices=devices, links=[links[k] for k in sorted(links)], ports=ports, port_guids=port_guids)


def _port_label(devices: dict[str, IbDevice], end: tuple[str, int]) -> str:
    dev = devices.get(end[0])
    return f"{dev.name if dev else end[0]}/{end[1]}"


# --- counters ---------------------------------------------------------------------------------


def parse_perfquery(text: str, guid: str | None = None) -> PortCounters:
    """The one block of ``perfquery [-x] LID PORT``; ``guid`` names the device (the output
    has only the LID). Port 255 (``-a``) is ``ALL_PORTS``: the device's ports summed."""
    blocks = parse_perfquery_blocks(text, guid)
    if len(blocks) != 1:
        raise IbParseError(
            "perfquery", 0, "", f"{len(blocks)} counter blocks, expected one (use parse_perfquery_blocks for -l output)"
        )
    return blocks[0]


def parse_perfquery_blocks(text: str, guid: str | None = None) -> list[PortCounters]:
    """Every '# Port counters: Lid N port P' block (``perfquery -l``, or several runs' output)."""
    tool = "perfquery"
    device = normalize_guid(guid) if guid else ""
    blocks: list[PortCounters] = []
    current: dict[str, int] | None = None
    for n, line in _lines(text):
        if not line.strip():
            continue
        try:
            if line.startswith("# Port"):  # '# Port counters: Lid 5 port 1 (CapMask: 0x1200)'
                tokens = line.split(":", 1)[1].split()
                if tokens[0] != "Lid" or tokens[2] != "port":
                    raise ValueError("expected 'Lid N port P'")
                current = {}
                blocks.append(PortCounters(device, int(tokens[3]), current))
                continue
            if current is None:
                raise ValueError("counter before a '# Port counters' header")
            name, sep, value = line.partition(":")
            if not sep or not name or " " in name:
                raise ValueError("expected 'Name:....value'")
            if name not in _NOT_COUNTERS:
                current[counter_name(name)] = int(value.lstrip("."), 0)
        except (ValueError, IndexError) as exc:
            raise IbParseError(tool, n, line, _reason(exc)) from None
    if not blocks or not all(b.counters for b in blocks):
        raise IbParseError(tool, 0, "", "no counters (empty or truncated output)")
    return blocks


def parse_ibqueryerrors(text: str) -> list[PortCounters]:
    """The ports ``ibqueryerrors`` reports (errors over threshold, or ``--counters`` data),
    with only the counters it prints. "port ALL" lines (a switch's ports summed) are not a
    port and are skipped; "Link info" lines (``-r``) too. The GUID is the one printed: on
    error lines a CA's *port* GUID (``resolve_counters`` maps it to the node)."""
    tool = "ibqueryerrors"
    result: list[PortCounters] = []
    in_node = False
    summary = False
    for n, line in _lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            if stripped.startswith("##"):
                summary = summary or stripped.startswith("## Summary:")
            elif line.startswith(("Errors for ", "Data Counters for ")):
                _quoted(line)  # the node's name must be complete
                in_node = True
            elif stripped.startswith("GUID "):
                if not in_node:
                    raise ValueError("port line before an 'Errors for' header")
                entry = _qe_port(stripped)
                if entry is not None:
                    result.append(entry)
            elif stripped.startswith("Link info:"):
                continue
            else:
                raise ValueError("unknown line")
        except (ValueError, IndexError) as exc:
            raise IbParseError(tool, n, line, _reason(exc)) from None
    if not summary:
        raise IbParseError(tool, 0, "", "no '## Summary' line (output truncated, or the scan failed)")
    return result


def _qe_port(line: str) -> PortCounters | None:
    """'GUID 0x2c90300002005 port 1: [SymbolErrorCounter == 1234] [PortXmitData == 1008 (3.938KB)]'"""
    head, sep, rest = line.partition(":")
    tokens = head.split()
    if not sep or len(tokens) != 4 or tokens[2] != "port":
        raise ValueError("expected 'GUID 0x... port N:'")
    guid = normalize_guid(tokens[1])
    if tokens[3] == "ALL":
        return None
    counters = dict(_qe_counters(rest))
    if not counters:
        raise ValueError("a port line with no counter")
    return PortCounters(guid, int(tokens[3]), counters)


def _qe_counters(rest: str) -> Iterable[tuple[str, int]]:
    pos = 0
    while True:
        start = rest.find("[", pos)
        if start < 0:
            if rest[pos:].strip():
                raise ValueError("text after the counters")
            return
        end = rest.find("]", start)
        if end < 0:
            raise ValueError("unclosed '[' (line cut short?)")
        name, sep, value = rest[start + 1 : end].partition(" == ")
        if not sep:
            raise ValueError("expected '[Name == value]'")
        yield counter_name(name.strip()), int(value.split()[0])
        pos = end + 1


def resolve_counters(counters: Iterable[PortCounters], topology: IbTopology) -> list[PortCounters]:
    """The counters keyed by node GUID (the tools print port GUIDs on some lines). A GUID
    that is not on the fabric raises ``IbMergeError``: the outputs are not of one scan."""
    result = []
    for entry in counters:
        node = topology.device_guid(entry.guid)
        if node is None:
            raise IbMergeError(f"counters for GUID {entry.guid} port {entry.port}, which is not on the fabric")
        result.append(entry if node == entry.guid else PortCounters(node, entry.port, entry.counters))
    return result
