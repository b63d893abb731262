"""Plotly figures of trend flags as plain dicts, drawn from the flag's evidence: views pass
them to templates through json_script, tests assert on their data. No plotly.js here."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from .choices import FLAG_COLOURS, FlagKind
from .models import TrendFlag

Figure = dict[str, Any]

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 60, "r": 10, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "height": 260,
}


def flag_figure(flag: TrendFlag) -> Figure:
    """The chart that shows why a flag is there: the trend, the peers, or the lemon's signals."""
    if flag.kind == FlagKind.DEGRADING:
        return trend_figure(flag.evidence, window=analysis_window(flag))
    if flag.kind == FlagKind.UNDERPERFORMER:
        return peers_figure(flag.evidence)
    return lemon_figure(flag.evidence)


def analysis_window(flag: TrendFlag) -> tuple[datetime, datetime]:
    """The days the analysis read when it last saw the flag: what its time chart shows.

    Fixed by the analysis, not by the portal's time range (nodewarden/timerange.py): the chart is
    the evidence the flag stands on, and another window would show a trend that was not judged."""
    return flag.updated - timedelta(days=flag.window_days), flag.updated


def trend_figure(evidence: dict[str, Any], window: tuple[datetime, datetime] | None = None) -> Figure:
    """The figure over time (markers) with its least-squares line; ``window`` pins the time axis
    to the analysis window, so the chart's width says how long a stretch was judged."""
    points, line = evidence.get("points", []), evidence.get("line", [])
    unit = evidence.get("unit", "")
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": evidence.get("label", "value"),
            "x": [t for t, _ in points],
            "y": [v for _, v in points],
            "marker": {"color": "#4a78c2"},
            "hovertemplate": f"%{{y:,.2f}} {unit}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "trend",
            "x": [t for t, _ in line],
            "y": [v for _, v in line],
            "line": {"color": FLAG_COLOURS[FlagKind.DEGRADING], "dash": "dash"},
            "hoverinfo": "skip",
        },
    ]
    xaxis: dict[str, Any] = {"type": "date"}
    if window:
        xaxis["range"] = [moment.strftime("%Y-%m-%d %H:%M:%S") for moment in window]
    layout = {**_BASE_LAYOUT, "showlegend": False, "xaxis": xaxis, "yaxis": {"title": {"text": unit}}}
    return {"data": data, "layout": layout}


def peers_figure(evidence: dict[str, Any]) -> Figure:
    """The profile's distribution of the figure (histogram), the median and this node's value."""
    hist = evidence.get("histogram") or {"edges": [], "counts": []}
    edges, counts = hist["edges"], hist["counts"]
    centres = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    top = max(counts, default=1)
    data = [
        {
            "type": "bar",
            "name": "peers",
            "x": centres,
            "y": counts,
            "width": widths,
            "marker": {"color": "#8b95a5"},
            "hovertemplate": "%{y} nodes<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "median",
            "x": [evidence.get("median")] * 2,
            "y": [0, top],
            "line": {"color": "#2e9e5b", "dash": "dash"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "this node",
            "x": [evidence.get("value")] * 2,
            "y": [0, top],
            "line": {"color": FLAG_COLOURS[FlagKind.UNDERPERFORMER], "width": 3},
        },
    ]
    layout = {
        **_BASE_LAYOUT,
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "bargap": 0.05,
        "xaxis": {"title": {"text": evidence.get("unit", "")}},
        "yaxis": {"title": {"text": "nodes"}},
    }
    return {"data": data, "layout": layout}


def lemon_figure(evidence: dict[str, Any]) -> Figure:
    """Points of the lemon score per signal (they add up to the score), largest on top."""
    labels = evidence.get("labels", {})
    parts = sorted(evidence.get("contributions", {}).items(), key=lambda kv: kv[1])
    signals = evidence.get("signals", {})
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "x": [v for _, v in parts],
            "y": [labels.get(k, k) for k, _ in parts],
            "customdata": [signals.get(k, 0) for k, _ in parts],
            "marker": {"color": FLAG_COLOURS[FlagKind.LEMON]},
            "hovertemplate": "%{x:.1f} points (value %{customdata})<extra></extra>",
        }
    ]
    layout = {
        **_BASE_LAYOUT,
        "margin": {**_BASE_LAYOUT["margin"], "l": 260},
        "showlegend": False,
        "xaxis": {"title": {"text": "points of the score (0-100)"}},
    }
    return {"data": data, "layout": layout}
