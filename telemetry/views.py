"""Portal views of the telemetry app."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone

from nodes.scoping import visible_node_or_404

from . import charts
from .models import GpuState, NodeHealth
from .series import WINDOWS, gpu_series

DEFAULT_WINDOW = "6h"
HOT_MARGIN_C = 5.0  # a GPU this close to its slowdown temperature is flagged before it throttles


@dataclass
class GpuRow:
    """One GPU in the partial's table, with the names of the cells that look degraded."""

    gpu: GpuState
    flags: set[str]
    stale: bool


def gpu_flags(g: GpuState) -> set[str]:
    """Cells to highlight: the same signals the health rules act on, shown, not judged."""
    flags = set()
    hot_at = g.slowdown_temp_c - HOT_MARGIN_C if g.slowdown_temp_c else g.max_operating_temp_c
    if g.temperature_c is not None and hot_at is not None and g.temperature_c >= hot_at:
        flags.add("temperature")
    if (
        g.hbm_temperature_c is not None
        and g.hbm_max_operating_temp_c
        and g.hbm_temperature_c >= g.hbm_max_operating_temp_c
    ):
        flags.add("hbm")
    if g.ecc_volatile_uncorrected:
        flags.add("ecc")
    if g.remapped_rows_pending or g.remapped_rows_failure:
        flags.add("remap")
    if g.nvlink_links_total is not None and g.nvlink_links_up is not None and g.nvlink_links_up < g.nvlink_links_total:
        flags.add("nvlink")
    if (g.pcie_link_gen or 0) < (g.pcie_max_link_gen or 0) or (g.pcie_link_width or 0) < (g.pcie_max_link_width or 0):
        flags.add("pcie")
    return flags


def age_text(since: datetime | None, now: datetime) -> str:
    """ "12 s ago", "5 min ago", "3 h ago", "2 d ago"."""
    if since is None:
        return "never"
    seconds = max(int((now - since).total_seconds()), 0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def node_gpu_health(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "GPU health" partial (loaded with htmx): latest state and charts."""
    node = visible_node_or_404(request.user, pk)
    window = request.GET.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        return HttpResponseBadRequest(f"Unknown window {window!r}: use one of {', '.join(WINDOWS)}.")
    health = NodeHealth.objects.filter(node=node).first()
    now = timezone.now()
    context: dict[str, Any] = {"node": node, "health": health, "windows": list(WINDOWS), "window": window}
    if health is not None:
        states = list(GpuState.objects.filter(node=node))
        context["gpus"] = [GpuRow(g, gpu_flags(g), g.updated_at < health.last_report_at) for g in states]
        context["report_age"] = age_text(health.last_report_at, now)
        series = gpu_series(node.pk, since=now - WINDOWS[window], until=now, gpu_count=len(states) or 1)
        figures = charts.gpu_figures(series) if series.gpus else {}
        context["figures"] = [{"id": k, "data_id": f"{k}-data", "figure": f} for k, f in figures.items()]
        context["ib_down"] = [p for p in health.ib_ports if p.get("state") != "ACTIVE"]
    return render(request, "telemetry/_node_gpu_health.html", context)
