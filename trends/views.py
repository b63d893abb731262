"""Portal pages of trends (staff only; anyone else is answered 404): the fleet's lemon
nodes, underperformers per hardware profile and degrading nodes; a node's trend page and
the node page's "Trends" partial (htmx), each flag with the chart of its evidence."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.models import Node
from nodes.scoping import staff_only, visible_node_or_404
from nodewarden.beat import next_run

from . import analysis, charts
from .choices import FLAG_COLOURS, FlagKind
from .models import TrendFlag, TrendRun

EVALUATE_TASK = "trends.tasks.evaluate_trends"

LIST_ROWS = 200  # open flags listed per kind on the fleet page; the API pages through the rest
CLEARED_ROWS = 10  # cleared flags shown on a node's page


def _open(kind: str) -> Any:
    # node and its profile: the hostname and the grouping of underperformers per profile.
    return TrendFlag.objects.filter(kind=kind, cleared_at__isnull=True).select_related("node__hardware_profile")


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """Top lemon nodes, underperformers per hardware profile, degrading nodes, the last run."""
    counts = TrendFlag.objects.filter(cleared_at__isnull=True).aggregate(
        **{kind: Count("id", filter=Q(kind=kind)) for kind in FlagKind.values}
    )
    run = TrendRun.objects.filter(finished__isnull=False).first()
    underperformers = _open(FlagKind.UNDERPERFORMER).order_by("node__hardware_profile__name", "-score", "id")
    degrading = _open(FlagKind.DEGRADING).order_by("figure", "score", "id")
    return render(
        request,
        "trends/overview.html",
        {
            "run": run,
            # What fills the page and when: the evaluation's next run, from the beat schedule.
            "next_run": next_run(EVALUATE_TASK),
            "counts": counts,
            "colours": FLAG_COLOURS,
            "lemons": run.top_lemons if run else [],
            "underperformers": underperformers[:LIST_ROWS],
            "degrading": degrading[:LIST_ROWS],
            "list_rows": LIST_ROWS,
            "lemon_threshold": analysis.LEMON_THRESHOLD,
            "signals": analysis.LEMON_SIGNALS,
            "lemon_days": analysis.LEMON_WINDOW_DAYS,
            "trend_days": analysis.TREND_WINDOW_DAYS,
            "peer_pct": analysis.PEER_THRESHOLD * 100,
            "peer_min_z": analysis.PEER_MIN_Z,
        },
    )


def _node_context(node: Node) -> dict[str, Any]:
    flags = list(TrendFlag.objects.filter(node=node, cleared_at__isnull=True).order_by("kind", "figure"))
    cleared = list(
        TrendFlag.objects.filter(node=node, cleared_at__isnull=False).order_by("-cleared_at", "-id")[:CLEARED_ROWS]
    )
    rows = [
        {
            "flag": f,
            "figure": charts.flag_figure(f),
            "chart_id": f"trend-chart-{f.pk}",
            "data_id": f"trend-chart-{f.pk}-data",
            "colour": FLAG_COLOURS[f.kind],
            "window_start": charts.analysis_window(f)[0],
        }
        for f in flags
    ]
    return {"node": node, "rows": rows, "cleared": cleared}


@staff_only
def node_trends_page(request: HttpRequest, pk: int) -> HttpResponse:
    """One node's open flags with their charts, and recently cleared ones."""
    node = visible_node_or_404(request.user, pk)
    return render(request, "trends/node.html", _node_context(node))


@staff_only
def node_trends_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Trends" partial (htmx)."""
    node = visible_node_or_404(request.user, pk)
    return render(request, "trends/_node_trends.html", {**_node_context(node), "partial": True})
