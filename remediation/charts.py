"""Plotly figures of remediation as plain dicts: views pass them to templates through
json_script, tests assert on their data. No plotly.js here, no HTML."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from nodes.choices import STATE_PHASE, NodeState, Phase
from nodes.models import StateCountSnapshot

Figure = dict[str, Any]

# "In production" is the production phase: a node whose drain is pending still serves its job.
SERVING = tuple(state for state, phase in STATE_PHASE.items() if phase == Phase.PRODUCTION)

_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 10, "t": 10, "b": 40},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


def availability_by_cluster(snapshots: QuerySet[StateCountSnapshot]) -> Figure:
    """Per cluster and day, the share (%) of the cluster's nodes in production, one line per cluster.

    A day's share is its snapshots' production counts over their totals (node-hours when the
    snapshots are hourly); decommissioned nodes are no longer the cluster's and count nowhere.
    """
    rows = (
        snapshots.filter(cluster__isnull=False)
        .exclude(state=NodeState.DECOMMISSIONED)
        .annotate(day=TruncDate("taken_at"))
        .values("cluster__name", "day")
        .annotate(total=Sum("count"), serving=Sum("count", filter=Q(state__in=SERVING)))
        .order_by("cluster__name", "day")
    )
    per_cluster: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for row in rows:
        if row["total"]:
            share = round(100 * (row["serving"] or 0) / row["total"], 1)
            per_cluster[row["cluster__name"]].append((row["day"].isoformat(), share))
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": [day for day, _ in points],
            "y": [share for _, share in points],
            "hovertemplate": f"{name}: %{{y}}% in production<extra></extra>",
        }
        for name, points in per_cluster.items()
    ]
    layout = {
        **_BASE_LAYOUT,
        "height": 300,
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.2},
        "xaxis": {"type": "date"},
        "yaxis": {"title": {"text": "% in production"}, "range": [0, 100.5], "ticksuffix": "%"},
    }
    return {"data": data, "layout": layout}
