"""What happens after a transition commits, keyed by transition name.

A handler gets the node (locked by nobody; it calls services for any change of
state) and the triggering event, and returns a one-line summary. Later work
(Day 0 provisioning, Day 1 stages, remediation) registers its handlers here.
"""
from __future__ import annotations

from collections.abc import Callable

from fleet.choices import SchedulerKind

from . import services
from .models import Node, NodeEvent

Handler = Callable[[Node, NodeEvent], str]
FOLLOWUPS: dict[str, Handler] = {}

ACTOR = services.Actor.system("followup")


def followup(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        FOLLOWUPS[name] = fn
        return fn

    return register


def _has_workload_scheduler(node: Node) -> bool:
    return node.cluster is not None and node.cluster.scheduler_kind != SchedulerKind.NONE


@followup("request_drain")
def drain_when_idle(node: Node, event: NodeEvent) -> str:
    """Without a workload scheduler no customer job can be running: start draining at once."""
    if _has_workload_scheduler(node):
        return f"Waiting for the {node.cluster.get_scheduler_kind_display()} job on the node to end."
    services.start_draining(node.pk, actor=ACTOR, reason="No workload scheduler: no job to wait for.",
                            details={"trigger_event": event.pk})
    return "No workload scheduler: started draining."


@followup("start_draining")
def finish_drain_when_empty(node: Node, event: NodeEvent) -> str:
    """Without a workload scheduler there is nothing to move off: the drain is complete."""
    if _has_workload_scheduler(node):
        return f"Waiting for {node.cluster.get_scheduler_kind_display()} to report the node drained."
    services.complete_drain(node.pk, actor=ACTOR, reason="No workload scheduler: nothing to drain.",
                            details={"trigger_event": event.pk})
    return "No workload scheduler: drain complete."
