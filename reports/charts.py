"""Plotly figures of the reports as plain dicts: views pass them to templates through
json_script, tests assert on their data. No plotly.js here, no HTML."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from nodes.choices import STATE_COLOURS, NodeState
from nodes.statecounts import DayCount

from .choices import ATTRIBUTION_COLOURS, SERVING, Attribution

Figure = dict[str, Any]

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
}
NONE_LABEL = "(none)"
# Below this many, plotly's automatic ticks on a count axis fall between whole numbers (0, 0.2, ...).
FEW_COUNTS = 10


def count_axis(peak: float, **extra: Any) -> dict[str, Any]:
    """An axis of counts: whole-number ticks only, from zero. plotly picks fractional steps for a small
    range (0.2 for a peak of 1), so up to FEW_COUNTS the step is fixed at 1; above, it stays automatic
    (which is then whole) and the labels are shown without decimals."""
    axis: dict[str, Any] = {"rangemode": "tozero", "tickformat": ",d", **extra}
    if peak <= FEW_COUNTS:
        axis["dtick"] = 1
    return axis


# The sums availability_over_time needs, for statecounts.daily_counts(buckets=...) to add up in the
# database: decommissioned nodes are in neither.
SERVING_BUCKET = "serving"
AVAILABILITY_BUCKETS: dict[str, tuple[str, ...]] = {
    SERVING_BUCKET: SERVING,
    "not serving": tuple(s for s in NodeState.values if s not in SERVING and s != NodeState.DECOMMISSIONED),
}


def availability_over_time(counts: Sequence[DayCount], period: tuple[datetime, datetime] | None = None) -> Figure:
    """Per group (``statecounts.daily_counts`` by cluster or tenant name, per state or in
    ``AVAILABILITY_BUCKETS``) and day, the share (%) of its nodes in production, one line each.

    A day's share is its production node-hours over all its node-hours (the snapshots being
    hourly); decommissioned nodes are no longer anyone's and count nowhere. With ``period``
    (since, until) the time axis spans its days, each point in the middle of its day: left to
    itself, plotly spreads a single day's point over a millisecond of ticks.
    """
    totals: dict[tuple[str, date], list[int]] = defaultdict(lambda: [0, 0])
    for c in counts:
        if c.state != NodeState.DECOMMISSIONED:
            day_total = totals[(c.group or NONE_LABEL, c.day)]
            day_total[0] += c.node_hours
            day_total[1] += c.node_hours if c.state in SERVING or c.state == SERVING_BUCKET else 0
    lines: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (name, day), (total, serving) in sorted(totals.items()):
        if total:
            lines[name].append((day.isoformat(), round(100 * serving / total, 1)))
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": [day for day, _ in points],
            "y": [share for _, share in points],
            "hovertemplate": f"{name}: %{{y}}% in production<extra></extra>",
        }
        for name, points in lines.items()
    ]
    layout = {
        **_BASE_LAYOUT,
        "height": 300,
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.2},
        "xaxis": {"type": "date", **({"range": _day_span(*period)} if period else {})},
        "yaxis": {"title": {"text": "% in production"}, "range": [0, 100.5], "ticksuffix": "%"},
    }
    return {"data": data, "layout": layout}


def _day_span(since: datetime, until: datetime) -> list[str]:
    """The time axis of daily points from ``since`` to ``until``: half a day before the first day
    and after the last (a point sits at its day's midnight)."""
    first = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    last = max(
        first, (until - timedelta(microseconds=1)).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    )
    half = timedelta(hours=12)
    return [(first - half).strftime("%Y-%m-%d %H:%M"), (last + half).strftime("%Y-%m-%d %H:%M")]


FORWARD_BAND = "rgba(74,120,194,0.30)"
RETURN_BAND = "rgba(46,160,67,0.30)"  # back to an earlier state of the lifecycle


def lifecycle_sankey(flows: Sequence[dict[str, Any]], link: Callable[[str, str], str]) -> Figure:
    """The period's state changes as a Sankey diagram: a node per state, a band per (source, target)
    as wide as its count. Each band's customdata is the URL listing its nodes (``link``), which the
    page's script opens on a click."""
    states = [s for s in NodeState if any(s in (f["source"], f["target"]) for f in flows)]
    index = {s.value: i for i, s in enumerate(states)}
    shown = [f for f in flows if f["source"] in index and f["target"] in index]
    data = [
        {
            "type": "sankey",
            "arrangement": "snap",
            "valueformat": ",d",
            # The labels sit on the bands: plotly's automatic halo (a blurred outline in the colour
            # opposite the text's) drew grey boxes over them in the dark theme. The colour is the
            # theme's text colour (layout.font, set by portal.js), readable on the translucent bands.
            "textfont": {"shadow": "none", "size": 12},
            "node": {
                "label": [s.label for s in states],
                "color": [STATE_COLOURS[s] for s in states],
                "pad": 18,
                "thickness": 14,
                "hovertemplate": "%{label}: %{value:,d} changes<extra></extra>",
            },
            "link": {
                "source": [index[f["source"]] for f in shown],
                "target": [index[f["target"]] for f in shown],
                "value": [f["count"] for f in shown],
                "customdata": [link(f["source"], f["target"]) for f in shown],
                # A change back to an earlier state of the lifecycle (drain cancelled, repaired and
                # re-validated) is drawn by plotly as a loop over the others: its own colour says
                # it is a return, not an empty box.
                "color": [RETURN_BAND if index[f["target"]] < index[f["source"]] else FORWARD_BAND for f in shown],
                "hovertemplate": "%{source.label} → %{target.label}: %{value:,d}<br>click to list the nodes<extra></extra>",
            },
        }
    ]
    # Room on the right for the labels plotly puts beside the nodes of the next-to-last column.
    layout = {**_BASE_LAYOUT, "height": 460, "margin": {"l": 10, "r": 150, "t": 10, "b": 10}}
    return {"data": data, "layout": layout}


def failure_causes(causes: Sequence[dict[str, Any]]) -> Figure:
    """Horizontal bars: findings per cause, commonest on top, coloured by component."""
    ordered = list(reversed(causes))
    components = sorted({c["component"] for c in causes})
    stacks: dict[str, int] = defaultdict(int)  # the bars stack per cause
    for c in causes:
        stacks[c["cause"]] += c["count"]
    peak = max(stacks.values(), default=0)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": component,
            "y": [c["cause"] for c in ordered if c["component"] == component],
            "x": [c["count"] for c in ordered if c["component"] == component],
            "hovertemplate": f"{component}: %{{y}}: %{{x:,d}}<extra></extra>",
        }
        for component in components
    ]
    layout = {
        **_BASE_LAYOUT,
        "height": 80 + 22 * max(len(causes), 1),
        "barmode": "stack",
        "showlegend": True,
        # The cause names are long: plotly widens the left margin to fit them (a fixed one clipped them).
        "margin": {"l": 10, "r": 10, "t": 10, "b": 30},
        "legend": {"orientation": "h", "y": -0.15},
        "xaxis": count_axis(peak),
        "yaxis": {"categoryorder": "array", "categoryarray": [c["cause"] for c in ordered], "automargin": True},
    }
    return {"data": data, "layout": layout}


def downtime_by_cluster(downtime: dict[str, Any]) -> Figure | None:
    """Stacked bars per cluster: node-hours of downtime, the provider's and the customer's (None
    when no cluster had any: the table says so, and an empty chart would only show bare axes)."""
    clusters = downtime["clusters"]
    if not any(c[a]["hours"] for c in clusters for a in Attribution.values):
        return None
    data = [
        {
            "type": "bar",
            "name": Attribution(a).label,
            "x": [c["cluster"] or NONE_LABEL for c in clusters],
            "y": [c[a]["hours"] for c in clusters],
            "marker": {"color": ATTRIBUTION_COLOURS[a]},
            "hovertemplate": f"{Attribution(a).label}: %{{y:,.1f}} node-hours<extra></extra>",
        }
        for a in Attribution.values
    ]
    layout = {
        **_BASE_LAYOUT,
        "height": 280,
        "barmode": "stack",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "yaxis": {"title": {"text": "node-hours"}},
    }
    return {"data": data, "layout": layout}
