"""Plotly figures as plain dicts: views pass them to templates through json_script,
tests assert on their data. No plotly.js here, no HTML."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

from django.utils import timezone

from .choices import STATE_COLOURS, STATE_LAYOUT, NodeState
from .models import Node, NodeEvent
from .statecounts import DayCount, SnapshotCount

Figure = dict[str, Any]

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 40, "r": 10, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


def state_counts_over_time(counts: Sequence[DayCount], x_range: tuple[datetime, datetime] | None = None) -> Figure:
    """Stacked area of the average number of nodes per state and day (``statecounts.daily_counts``),
    one trace per state that had nodes; today's point averages the snapshots taken so far.
    ``x_range`` pins the time axis to the page's time range (nodewarden/timerange.py)."""
    days = sorted({c.day for c in counts})
    samples = {c.day: c.samples for c in counts}
    per_state: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for c in counts:
        per_state[c.state][c.day] += c.node_hours
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "states",
            "name": state.label,
            "x": [d.isoformat() for d in days],
            "y": [round(per_state[state][d] / samples[d], 1) if samples[d] else 0 for d in days],
            "line": {"width": 0.5, "color": STATE_COLOURS[state]},
            "hovertemplate": f"{state.label}: %{{y}} (day's average)<extra></extra>",
        }
        for state in NodeState
        if state in per_state
    ]
    return {"data": data, "layout": _stacked_states_layout(x_range)}


def state_counts_per_snapshot(
    counts: Sequence[SnapshotCount], x_range: tuple[datetime, datetime] | None = None
) -> Figure:
    """The same stacked area as :func:`state_counts_over_time`, one point per hourly snapshot: the
    chart of a range of hours (``statecounts.snapshot_counts``)."""
    moments = sorted({c.taken_at for c in counts})
    per_state: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for c in counts:
        per_state[c.state][c.taken_at] += c.count
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "stackgroup": "states",
            "name": state.label,
            "x": [m.strftime("%Y-%m-%d %H:%M:%S") for m in moments],
            "y": [per_state[state][m] for m in moments],
            "line": {"width": 0.5, "color": STATE_COLOURS[state]},
            "hovertemplate": f"{state.label}: %{{y}}<extra></extra>",
        }
        for state in NodeState
        if state in per_state
    ]
    return {"data": data, "layout": _stacked_states_layout(x_range)}


def _stacked_states_layout(x_range: tuple[datetime, datetime] | None) -> dict[str, Any]:
    """The layout both stacked-area charts of node states share (per day and per snapshot)."""
    return {
        **_BASE_LAYOUT,
        "height": 300,
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.2},
        "xaxis": _time_axis(x_range),
        "yaxis": {"title": {"text": "nodes"}},
    }


def _time_axis(x_range: tuple[datetime, datetime] | None) -> dict[str, Any]:
    """A date axis, pinned to ``x_range`` when given (a zoom on it moves the page's range)."""
    axis: dict[str, Any] = {"type": "date"}
    if x_range:
        axis["range"] = [moment.strftime("%Y-%m-%d %H:%M:%S") for moment in x_range]
    return axis


def state_timeline(
    node: Node,
    changes: Sequence[NodeEvent],
    now: datetime | None = None,
    x_range: tuple[datetime, datetime] | None = None,
) -> Figure:
    """The node's life as horizontal bars, one segment per stay in a state.

    ``changes`` are the node's state-change events, oldest first; ``x_range`` pins the time axis
    to the node page's time range (the one its history shows too).
    """
    now = now or timezone.now()
    segments: list[tuple[str, datetime, datetime]] = []
    start, state = node.created, (changes[0].source_state if changes else node.state)
    for change in changes:
        segments.append((state, start, change.created))
        start, state = change.created, change.target_state
    segments.append((state, start, now))
    data = []
    for s in NodeState:
        mine = [(a, b) for st, a, b in segments if st == s]
        if not mine:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": s.label,
                "y": [s.label] * len(mine),
                "base": [a.isoformat() for a, _ in mine],
                "x": [max((b - a).total_seconds() * 1000, 1) for a, b in mine],
                "marker": {"color": STATE_COLOURS[s]},
                "customdata": [[a.strftime("%Y-%m-%d %H:%M"), b.strftime("%Y-%m-%d %H:%M")] for a, b in mine],
                "hovertemplate": f"{s.label}<br>%{{customdata[0]}} to %{{customdata[1]}}<extra></extra>",
            }
        )
    ordered = [s.label for s in NodeState if any(st == s for st, _, _ in segments)]
    layout = {
        **_BASE_LAYOUT,
        "height": 60 + 28 * len(ordered),
        "showlegend": False,
        "barmode": "overlay",
        "margin": {"l": 160, "r": 10, "t": 10, "b": 30},
        "xaxis": _time_axis(x_range),
        "yaxis": {"categoryorder": "array", "categoryarray": list(reversed(ordered))},
    }
    return {"data": data, "layout": layout}


def lifecycle_edges() -> list[tuple[str, str, str]]:
    """Every (source, target, transition name) the state machine declares, overrides excluded."""
    field = Node._meta.get_field("state")
    edges = []
    for t in field.get_all_transitions(Node):
        if t.custom.get("admin_only") or t.source in ("*", "+"):
            continue
        # A target that depends on why (complete_drain: triage or maintenance) is one edge per state.
        targets = t.target.allowed_states if hasattr(t.target, "allowed_states") else [t.target]
        edges += [(str(t.source), str(target), t.name) for target in targets]  # the states' values
    return sorted(set(edges))


def lifecycle_graph(changes: Iterable[NodeEvent], current: str | None) -> Figure:
    """The state machine drawn on fixed positions, with this node's path over it.

    Declared transitions are grey arrows; the ones this node took are coloured and
    thicker with use, forced changes are dashed red, the current state is ringed.
    """
    taken: dict[tuple[str, str], int] = defaultdict(int)
    forced: set[tuple[str, str]] = set()
    for change in changes:
        key = (change.source_state, change.target_state)
        taken[key] += 1
        if change.transition == "force_state":
            forced.add(key)
    annotations = []
    for source, target, _ in lifecycle_edges():
        annotations.append(_arrow(source, target, "#c9ced6", 1))
    for (source, target), count in taken.items():
        if source in STATE_LAYOUT and target in STATE_LAYOUT and source != target:
            colour = "#c0392b" if (source, target) in forced else "#1f5fbf"
            annotations.append(_arrow(source, target, colour, min(1.5 + count, 5), hover=f"{count}×"))
    states = list(NodeState)
    visited = {s for pair in taken for s in pair}
    data = [
        {
            "type": "scatter",
            "mode": "markers+text",
            "name": "states",
            "x": [STATE_LAYOUT[s][0] for s in states],
            "y": [STATE_LAYOUT[s][1] for s in states],
            "text": [s.label for s in states],
            "textposition": "bottom center",
            "marker": {
                "size": [26 if s == current else 16 for s in states],
                "color": [STATE_COLOURS[s] if (s in visited or s == current) else "#e3e6ea" for s in states],
                "line": {"width": [4 if s == current else 1 for s in states], "color": "#111"},
            },
            "hovertemplate": "%{text}<extra></extra>",
        }
    ]
    layout = {
        **_BASE_LAYOUT,
        "height": 380,
        "showlegend": False,
        "annotations": annotations,
        "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
        "xaxis": {"visible": False, "range": [-0.7, 8.8]},
        "yaxis": {"visible": False, "range": [-4.2, 0.6]},
    }
    return {"data": data, "layout": layout}


def _arrow(source: str, target: str, colour: str, width: float, hover: str = "") -> dict[str, Any]:
    (x0, y0), (x1, y1) = STATE_LAYOUT[source], STATE_LAYOUT[target]
    arrow = {
        "x": x1,
        "y": y1,
        "ax": x0,
        "ay": y0,
        "xref": "x",
        "yref": "y",
        "axref": "x",
        "ayref": "y",
        "showarrow": True,
        "arrowhead": 2,
        "arrowsize": 1,
        "arrowwidth": width,
        "arrowcolor": colour,
        "standoff": 9,
        "startstandoff": 9,
        "text": "",
        "name": f"{source}->{target}",
    }
    if hover:
        arrow["hovertext"] = hover
    return arrow
