"""Portal views of the telemetry app."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from nodes.models import OPERATE
from nodes.scoping import staff_only, visible_node_or_404
from nodes.services import Actor
from nodewarden.errors import ReasonRequired

from . import charts, commands
from .choices import CommandStatus, CommandVerb
from .models import AgentCommand, GpuState, NodeHealth
from .schema import MAX_GPUS
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


RECENT_COMMANDS = 10
COMMAND_COLOURS: dict[str, str] = {
    CommandStatus.QUEUED: "#888",
    CommandStatus.DELIVERED: "#1f77b4",
    CommandStatus.SUCCEEDED: "#2ca02c",
    CommandStatus.FAILED: "#d62728",
    CommandStatus.EXPIRED: "#7f7f7f",
}


@staff_only
def node_commands(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Agent commands" partial (staff): recent commands with who, why and the
    outcome (a diagnostics bundle folded open per part), and for operators the issue form."""
    node = visible_node_or_404(request.user, pk)
    recent = list(AgentCommand.objects.filter(node=node).order_by("-created", "-id")[:RECENT_COMMANDS])
    rows = [(c, COMMAND_COLOURS.get(c.status, "#888"), _result_parts(c)) for c in recent]
    gpu_count = node.hardware_profile.gpu_count if node.hardware_profile_id else MAX_GPUS
    return render(
        request,
        "telemetry/_node_commands.html",
        {
            "node": node,
            "rows": rows,
            "can_issue": request.user.has_perm(OPERATE),
            "verbs": CommandVerb.choices,
            "gpu_indices": range(min(gpu_count or MAX_GPUS, MAX_GPUS)),
        },
    )


def _result_parts(command: AgentCommand) -> list[tuple[str, str]]:
    """(name, text) of each part of a command's result worth showing (diagnostics: one per part)."""
    result = command.result if isinstance(command.result, dict) else {}
    return [(str(name), value if isinstance(value, str) else str(value)) for name, value in result.items()]


@staff_only
@require_POST
def node_command_issue(request: HttpRequest, pk: int) -> HttpResponse:
    """Issue an agent command from the node page's form (operators), then back to the node."""
    node = visible_node_or_404(request.user, pk)
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not issue commands to node agents.")
    verb = request.POST.get("verb", "")
    args: dict[str, Any] = {}
    if verb == CommandVerb.RESET_GPU:
        raw = request.POST.get("gpu", "")
        args["gpu"] = int(raw) if raw.isdigit() and len(raw) < 4 else raw  # clean_args names a bad index
    try:
        command = commands.issue_command(
            node.pk, verb, args=args, actor=Actor(user=request.user), reason=request.POST.get("reason", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except ReasonRequired as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Command {commands.describe(command)} queued; the agent takes it at its next poll.")
    return redirect("node-detail", pk=node.pk)
