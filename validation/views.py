"""Portal pages of Day 1: the fleet's Day 1 view, and the node page's "Day 1" partial
with the operator's start and skip buttons."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from nodes.choices import RUN_STATUS_COLOURS
from nodes.models import OPERATE
from nodes.scoping import visible_node_or_404, visible_nodes
from nodes.services import Actor
from nodewarden.errors import ReasonRequired

from . import services, summary
from .choices import BY_STATE

ACTIONS = {"start": services.start_stage, "skip": services.skip_stage}


@login_required
def day1_overview(request: HttpRequest) -> HttpResponse:
    """How many nodes are in each stage, how long stages take, what fails most, who is waiting."""
    nodes = visible_nodes(request.user)
    return render(
        request,
        "validation/overview.html",
        {
            "counts": summary.stage_counts(nodes),
            "durations": summary.stage_durations(nodes),
            "failures": summary.failure_reasons(nodes),
            "yield": summary.day1_yield(nodes),
            "waiting": summary.nodes_in_day1(nodes),
            "window_days": summary.WINDOW.days,
        },
    )


@login_required
def node_day1(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Day 1" partial (htmx): each stage of the current pass with its run."""
    node = visible_node_or_404(request.user, pk)
    progress = summary.node_progress(node)
    for step in progress["steps"]:
        if step.run is not None:
            step.run.colour = RUN_STATUS_COLOURS.get(step.run.status, "#888")
    info = BY_STATE.get(node.state)
    can_act = info is not None and request.user.has_perm(OPERATE)
    open_run = services.open_stage_run(node.pk, info) if can_act and info else None
    return render(
        request,
        "validation/_node_day1.html",
        {
            "node": node,
            **progress,
            "can_act": can_act,
            "open_run": open_run,
        },
    )


@login_required
@require_POST
def node_stage_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Start (or retry) or skip the node's current stage, with a reason, then back to the node."""
    node = visible_node_or_404(request.user, pk)
    verb = ACTIONS.get(action)
    if verb is None:
        return HttpResponseForbidden(f"Unknown stage action {action!r}.")
    try:
        run = verb(node.pk, actor=Actor(user=request.user), reason=request.POST.get("reason", ""))
    except services.StageForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except (ReasonRequired, services.StageConflict) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{run.get_kind_display()}: {run.get_status_display().lower()}.")
    return redirect("node-detail", pk=node.pk)
