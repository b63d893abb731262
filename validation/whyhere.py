"""The node page header's Day 1 line: which stage runs, since when, until when it may run, and the
stages of the plan still ahead; for a node in repair or RMA, the re-validation plan that follows.

Registered into ``nodes.whyhere`` from ``ValidationConfig.ready``: nodes never imports validation.
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.timesince import timesince

from nodes.choices import NodeState, RunStatus
from nodes.models import Node, NodeEvent, Run
from nodes.whyhere import Fact

from .choices import BY_STATE, STAGES, Reentry, Stage
from .models import Day1Spec, RevalidationPlan
from .services import planned_stages

THEN = "production"  # where a node goes once its plan's last stage passes (release_to_production)


def day1_stage(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """A node in a Day 1 stage: at most five queries (the pass, its persona change, the plan, the
    stage's newest run, the profile's spec). A node in repair or RMA: one (the plan)."""
    if node.state in (NodeState.REPAIR, NodeState.RMA):
        stages = RevalidationPlan.stages_for(node.state)
        label = Reentry(node.state).label.lower()
        return [Fact("validation", "Then", f"Re-validation, plan {label}: {_names(stages)}, then {THEN}.")]
    info = BY_STATE.get(node.state)
    if info is None:
        return []
    reentry, stages = planned_stages(node.pk)
    run = (
        Run.objects.filter(node=node, kind=info.run_kind)
        .only("id", "status", "created", "started")
        .order_by("-created", "-id")
        .first()
    )
    plan = "first validation" if reentry == Reentry.FIRST else _plan_label(reentry)
    text = f"{Stage(info.stage).label} ({plan})"
    eta = None
    if run is not None and run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        began = run.started or run.created
        text += f": run {run.pk} {RunStatus(run.status).label.lower()} since {began:%Y-%m-%d %H:%M} UTC"
        text += f" ({timesince(began, timezone.now())})."
        eta = began + Day1Spec.for_profile(node.hardware_profile).timeout(info.stage)
    else:
        text += ": no run open yet."
    order = [s.stage for s in STAGES]
    ahead = [s for s in order[order.index(info.stage) + 1 :] if s in stages]
    text += f" Next: {_names(ahead)}, then {THEN}." if ahead else f" Next: {THEN}."
    return [Fact("validation", "Day 1", text, eta=eta)]


def _names(stages: list[str]) -> str:
    return ", ".join(Stage(s).label for s in stages if s in Stage.values) or "no stage"


def _plan_label(reentry: str) -> str:
    if reentry in Reentry.values:
        return f"re-validation, plan {Reentry(reentry).label.lower()}"
    return f"re-validation, plan of the new {reentry}"
