"""Plotly figures of the fabric as plain dicts: views pass them to templates through
json_script, tests assert on their data. No plotly.js here, no HTML.

The topology figure stays small whatever the fabric's size: links are drawn one segment
per pair of markers (parallel cables are counted, not repeated), three line traces in
all (one per colour, segments separated by ``None``), and past HOST_MARKER_LIMIT hosts
each leaf's hosts become one marker with a count.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .choices import KIND_COLOURS, DeviceKind, DeviceRole, DiscrepancyKind, TicketStatus
from .models import CablingPlan, DiscoveredLink, DiscoveryRun, FabricDevice, PlannedLink, PortCounterSnapshot, Ticket

Figure = dict[str, Any]

HOST_MARKER_LIMIT = 256  # more hosts than this: one marker per leaf with the count
PROBLEM_MARKER_LIMIT = 300  # hover points on problem links (the red lines themselves are all drawn)
LABEL_LIMIT = 40  # a layer with more markers than this is named on hover only
OK, DOWN, TICKET = "#27ae60", "#a6acaf", "#c0392b"
LAYERS = (("spine", 2.0, "#1f5fbf"), ("leaf", 1.0, "#5d6d7e"), ("host", 0.0, "#17a589"))
COUNTERS_SHOWN = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 40, "r": 10, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


@dataclass
class _Pair:
    """The cables between two markers: how many are fine, down or in an open ticket, and why."""

    ok: int = 0
    down: int = 0
    bad: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def colour(self) -> str:
        return TICKET if self.bad else DOWN if self.down else OK


def _layers(devices: Mapping[int, Mapping[str, Any]], neighbours: Mapping[int, set[int]]) -> dict[int, str]:
    """HCAs are hosts; a switch with at least as many hosts as switches next to it is a leaf
    (a spine may carry a management host, as ufm01 on spine01); an unlinked switch keeps its role."""
    layers = {}
    for pk, device in devices.items():
        if device["kind"] == DeviceKind.CA:
            layers[pk] = "host"
            continue
        hosts = sum(1 for n in neighbours.get(pk, ()) if devices[n]["kind"] == DeviceKind.CA)
        switches = len(neighbours.get(pk, ())) - hosts
        linked = bool(neighbours.get(pk))
        leaf = hosts >= switches and hosts > 0 if linked else device["role"] == DeviceRole.LEAF
        layers[pk] = "leaf" if leaf else "spine"
    return layers


def _problem_ports(tickets: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Open tickets by the ports they name ("leaf02/1" -> ["Link down: ..."])."""
    ports: dict[str, list[str]] = defaultdict(list)
    for ticket in tickets:
        for endpoint in ticket["endpoints"]:
            ports[endpoint].append(f"#{ticket['id']} {ticket['title']}")
    return ports


def topology(run: DiscoveryRun | None, plan: CablingPlan | None) -> Figure:
    """The fabric as the last run saw it, with the planned cables it did not see.

    Rows: spines on top, leaves, hosts. Lines: green fine, red in an open ticket, grey
    down or missing with no ticket. Reads four flat queries (no per-device query).
    """
    seen = (
        list(DiscoveredLink.objects.filter(run=run).values_list("a_device_id", "a_port", "b_device_id", "b_port"))
        if run
        else []
    )
    planned = (
        list(PlannedLink.objects.filter(plan=plan).values_list("a_device_id", "a_port", "b_device_id", "b_port"))
        if plan
        else []
    )
    tickets = Ticket.objects.filter(status=TicketStatus.OPEN).values("id", "title", "endpoints")
    ids = {d for a, _, b, _ in seen + planned for d in (a, b) if d}
    devices = {d["id"]: d for d in FabricDevice.objects.filter(pk__in=ids).values("id", "name", "kind", "role")}
    return topology_figure(devices, seen, planned, _problem_ports(tickets))


def topology_figure(
    devices: Mapping[int, Mapping[str, Any]],
    seen: Sequence[tuple[int, int, int | None, int | None]],
    planned: Sequence[tuple[int, int, int, int]],
    problems: Mapping[str, list[str]],
) -> Figure:
    """The drawing itself, from plain rows (see ``topology``)."""
    if not devices:
        return _empty("No fabric yet: import a cabling plan or upload a discovery.", height=200)
    cables = [(a, ap, b, bp) for a, ap, b, bp in seen if b is not None]
    up = {(a, ap) for a, ap, _, _ in cables} | {(b, bp) for _, _, b, bp in cables}
    neighbours: dict[int, set[int]] = defaultdict(set)
    for a, _, b, _ in [*cables, *planned]:
        neighbours[a].add(b)
        neighbours[b].add(a)
    layer = _layers(devices, neighbours)
    # Each host hangs under the switch it is cabled to (the first one, for a dual-homed HCA).
    leaf_of = {
        pk: min(n for n in neighbours[pk] if layer[n] != "host")
        for pk in devices
        if layer[pk] == "host" and any(layer[n] != "host" for n in neighbours[pk])
    }
    aggregate = sum(1 for v in layer.values() if v == "host") > HOST_MARKER_LIMIT
    # Each device's marker: itself, or (aggregated) its leaf's host group, written as -leaf id.
    marker_of = {pk: (-leaf_of.get(pk, 0) if aggregate and layer[pk] == "host" else pk) for pk in devices}
    pairs: dict[tuple[int, int], _Pair] = defaultdict(_Pair)

    def note(a: int, ap: int, b: int, bp: int, is_up: bool) -> None:
        key = (min(marker_of[a], marker_of[b]), max(marker_of[a], marker_of[b]))
        pair = pairs[key]
        titles = problems.get(f"{devices[a]['name']}/{ap}", []) + problems.get(f"{devices[b]['name']}/{bp}", [])
        if titles:
            pair.bad += 1
            pair.problems += [t for t in titles if t not in pair.problems]
        elif is_up:
            pair.ok += 1
        else:
            pair.down += 1

    for a, ap, b, bp in cables:
        note(a, ap, b, bp, True)  # type: ignore[arg-type]  # a cable seen at both ends has both ports
    for a, ap, b, bp in planned:
        if (a, ap) not in up or (b, bp) not in up:
            note(a, ap, b, bp, False)  # not seen as planned: a down port or a missing (or moved) cable
    positions, markers = _positions(devices, layer, leaf_of, marker_of, problems, aggregate)
    data = _link_traces(pairs, positions) + markers
    layout = {
        **_BASE_LAYOUT,
        "height": 420,
        "showlegend": True,
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.05},
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
        "xaxis": {"visible": False, "range": [-0.02, 1.02]},
        "yaxis": {"visible": False, "range": [-0.5, 2.5]},
    }
    return {"data": data, "layout": layout}


def _positions(
    devices: Mapping[int, Mapping[str, Any]],
    layer: Mapping[int, str],
    leaf_of: Mapping[int, int],
    marker_of: Mapping[int, int],
    problems: Mapping[str, list[str]],
    aggregate: bool,
) -> tuple[dict[int, tuple[float, float]], list[Figure]]:
    """Marker positions (hosts under their leaf) and one marker trace per layer."""
    name = {pk: d["name"] for pk, d in devices.items()}
    leaves = sorted((pk for pk, v in layer.items() if v == "leaf"), key=name.__getitem__)
    order = {pk: i for i, pk in enumerate(leaves)}
    bad_devices = Counter(endpoint.rsplit("/", 1)[0] for endpoint in problems)
    # Per layer: (marker, label, hosts in the group, ports in open tickets).
    rows: dict[str, list[tuple[int, str, int, int]]] = {"spine": [], "leaf": [], "host": []}
    for pk in sorted((pk for pk, v in layer.items() if v == "spine"), key=name.__getitem__):
        rows["spine"].append((pk, name[pk], 0, bad_devices[name[pk]]))
    for pk in leaves:
        rows["leaf"].append((pk, name[pk], 0, bad_devices[name[pk]]))
    hosts = sorted(
        (pk for pk, v in layer.items() if v == "host"),
        key=lambda pk: (order.get(leaf_of.get(pk, 0), len(order)), name[pk]),
    )
    if aggregate:
        groups: dict[int, list[int]] = defaultdict(list)
        for pk in hosts:
            groups[marker_of[pk]].append(pk)
        for marker, members in sorted(groups.items(), key=lambda g: order.get(-g[0], len(order))):
            where = name.get(-marker, "no leaf")
            rows["host"].append(
                (
                    marker,
                    f"{len(members)} hosts on {where}",
                    len(members),
                    sum(1 for pk in members if bad_devices[name[pk]]),
                )
            )
    else:
        rows["host"] = [(pk, name[pk], 0, bad_devices[name[pk]]) for pk in hosts]
    spread = {key: [(i + 0.5) / len(row) for i in range(len(row))] for key, row in rows.items()}
    under: dict[int, list[float]] = defaultdict(list)  # a switch's hosts' x
    for (marker, *_), x in zip(rows["host"], spread["host"], strict=True):
        under[-marker if aggregate else leaf_of.get(marker, 0)].append(x)
    if rows["leaf"] and all(under.get(marker) for marker, *_ in rows["leaf"]):
        spread["leaf"] = [sum(under[m]) / len(under[m]) for m, *_ in rows["leaf"]]  # each leaf over its hosts
    positions: dict[int, tuple[float, float]] = {}
    traces = []
    for key, y, colour in LAYERS:
        row, xs = rows[key], spread[key]
        positions.update({marker: (x, y) for (marker, *_), x in zip(row, xs, strict=True)})
        if not row:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers+text" if len(row) <= LABEL_LIMIT else "markers",
                "name": {"spine": "Spines", "leaf": "Leaves", "host": "Host groups" if aggregate else "Hosts"}[key],
                "x": xs,
                "y": [y] * len(row),
                "text": [label for _, label, _, _ in row],
                "textposition": "top center" if key != "host" else "bottom center",
                "marker": {
                    "size": [min(10 + n // 4, 28) if n else 12 for _, _, n, _ in row],
                    "color": [TICKET if bad else colour for *_, bad in row],
                    "line": {"width": 1, "color": "#111"},
                },
                "customdata": [
                    (f"{bad} host(s) with open tickets" if hosts else f"{bad} port(s) in open tickets")
                    if bad
                    else "no open ticket"
                    for _, _, hosts, bad in row
                ],
                "hovertemplate": "%{text}<br>%{customdata}<extra></extra>",
            }
        )
    return positions, traces


def _link_traces(pairs: Mapping[tuple[int, int], _Pair], positions: Mapping[int, tuple[float, float]]) -> list[Figure]:
    """One line trace per colour, and hover points naming the tickets on the red ones."""
    lines: dict[str, tuple[list[float | None], list[float | None]]] = {c: ([], []) for c in (OK, DOWN, TICKET)}
    mid_x: list[float] = []
    mid_y: list[float] = []
    mid_text: list[str] = []
    for (a, b), pair in sorted(pairs.items()):
        if a not in positions or b not in positions:
            continue
        (x0, y0), (x1, y1) = positions[a], positions[b]
        xs, ys = lines[pair.colour]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
        if pair.bad and len(mid_x) < PROBLEM_MARKER_LIMIT:
            mid_x.append((x0 + x1) / 2)
            mid_y.append((y0 + y1) / 2)
            more = f"<br>and {len(pair.problems) - 3} more" if len(pair.problems) > 3 else ""
            mid_text.append("<br>".join(pair.problems[:3]) + more)
    names = {OK: "Links up", DOWN: "Down or missing", TICKET: "In an open ticket"}
    traces = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": names[c],
            "x": xs,
            "y": ys,
            "hoverinfo": "skip",
            "line": {"color": c, "width": 2 if c == TICKET else 1},
        }
        for c, (xs, ys) in lines.items()
        if xs
    ]
    if mid_x:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "Discrepancies",
                "x": mid_x,
                "y": mid_y,
                "text": mid_text,
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"symbol": "x", "size": 9, "color": TICKET},
            }
        )
    return traces


def runs_over_time(runs: Iterable[tuple[datetime, Mapping[str, Any]]]) -> Figure:
    """Discrepancies per run, stacked by kind; ``runs`` are (started, summary), oldest first."""
    runs = list(runs)
    if not runs:
        return _empty("No run in this window.", height=260)
    x = [started.isoformat() for started, _ in runs]
    data = []
    for kind in DiscrepancyKind:
        y = [int((summary.get("by_kind") or {}).get(kind, 0)) for _, summary in runs]
        if any(y):
            data.append(
                {
                    "type": "bar",
                    "name": kind.label,
                    "x": x,
                    "y": y,
                    "marker": {"color": KIND_COLOURS[kind]},
                    "hovertemplate": f"{kind.label}: %{{y}}<extra></extra>",
                }
            )
    if not data:  # every run clean: show the runs themselves as zeros
        data.append(
            {
                "type": "bar",
                "name": "Discrepancies",
                "x": x,
                "y": [0] * len(x),
                "hovertemplate": "no discrepancy<extra></extra>",
            }
        )
    layout = {
        **_BASE_LAYOUT,
        "height": 260,
        "barmode": "stack",
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "xaxis": {"type": "date"},
        "yaxis": {"title": {"text": "discrepancies"}, "rangemode": "tozero"},
    }
    return {"data": data, "layout": layout}


def counter_history(snapshots: Sequence[PortCounterSnapshot]) -> Figure:
    """A port's error counters over its snapshots (oldest first), one line per counter that moved."""
    if not snapshots:
        return _empty("No counters recorded for this port.", height=260)
    x = [s.taken_at.isoformat() for s in snapshots]
    names = [n for n in COUNTERS_SHOWN if any(s.counters.get(n) for s in snapshots)]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": n,
            "x": x,
            "y": [s.counters.get(n) for s in snapshots],
            "hovertemplate": f"{n}: %{{y}}<extra></extra>",
        }
        for n in names
    ]
    if not data:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "all error counters 0",
                "x": x,
                "y": [0] * len(x),
                "hovertemplate": "all error counters 0<extra></extra>",
            }
        )
    layout = {
        **_BASE_LAYOUT,
        "height": 280,
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "xaxis": {"type": "date"},
        "yaxis": {"title": {"text": "counter value"}, "rangemode": "tozero"},
    }
    return {"data": data, "layout": layout}


def _empty(message: str, height: int) -> Figure:
    return {
        "data": [],
        "layout": {
            **_BASE_LAYOUT,
            "height": height,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [
                {"text": message, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}
            ],
        },
    }
