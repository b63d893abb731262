"""What happens after a transition commits, keyed by transition name.

A handler gets the node (locked by nobody; it calls services for any change of
state) and the triggering event, and returns a one-line summary. Apps register
their handlers here (Day 0 provisioning, Day 1 stages, remediation, personas);
several may answer one transition, in registration order.

The drain road is the workload scheduler's (``schedulers.adapter_for``): a requested
drain asks the scheduler to let the current work finish and take no more; the node
moves to Draining, then to Triage, once the scheduler reports it drained (at once
without a scheduler; otherwise ``remediation``'s reconciler polls the scheduler, and asks
again for the drain if the scheduler could not be reached the first time).
"""
from __future__ import annotations

from collections.abc import Callable

from . import services
from .models import Node, NodeEvent

Handler = Callable[[Node, NodeEvent], str]
FOLLOWUPS: dict[str, list[Handler]] = {}

ACTOR = services.Actor.system("followup")


def followup(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        FOLLOWUPS.setdefault(name, []).append(fn)
        return fn

    return register


def run_followups(node: Node, event: NodeEvent) -> str | None:
    """Run every handler of the event's transition; their summaries joined, or None if there is none."""
    handlers = FOLLOWUPS.get(event.transition, [])
    if not handlers:
        return None
    return " ".join(summary for summary in (handler(node, event) for handler in handlers) if summary)


@followup("request_drain")
def drain_when_idle(node: Node, event: NodeEvent) -> str:
    """Ask the scheduler to drain (no new work, current work finishes); without work, drain on at once."""
    from schedulers.base import SchedulerError, adapter_for

    adapter = adapter_for(node.cluster)
    try:
        adapter.drain(node, reason=event.reason)
        busy = adapter.is_running_work(node)
    except SchedulerError as exc:  # the node stays drain pending; the reconciler asks again
        return f"The scheduler could not be asked to drain ({exc}); asking again later."
    if busy:
        return f"{node.cluster.get_scheduler_kind_display()} drains the node; waiting for its job to end."
    services.start_draining(node.pk, actor=ACTOR, reason="No customer job running: draining now.",
                            details={"trigger_event": event.pk, "scheduler": adapter.kind})
    return "No customer job running: started draining."


@followup("start_draining")
def finish_drain_when_empty(node: Node, event: NodeEvent) -> str:
    """The drain is complete once the scheduler reports no customer work left on the node."""
    from schedulers.base import SchedulerError, adapter_for

    adapter = adapter_for(node.cluster)
    try:
        adapter.drain(node, reason=event.reason)
        state = adapter.drain_state(node)
    except SchedulerError as exc:  # the node stays draining; the reconciler asks again
        return f"The scheduler could not be asked about the drain ({exc}); asking again later."
    if not state.drained:
        return f"Waiting for the scheduler to report the node drained ({state.detail})."
    services.complete_drain(node.pk, actor=ACTOR, reason="The workload scheduler reports the node drained.",
                            details={"trigger_event": event.pk, "scheduler": adapter.kind, "detail": state.detail})
    return "Drain complete."


@followup("release_to_production")
@followup("cancel_drain")
def take_work_again(node: Node, event: NodeEvent) -> str:
    """Back in production (or a drain cancelled before the job ended): the scheduler may give the
    node work (only a cordon we own is lifted)."""
    from schedulers.base import SchedulerConflict, SchedulerError, adapter_for

    try:
        adapter_for(node.cluster).uncordon(node, reason=event.reason)
    except SchedulerConflict as exc:
        return f"The scheduler keeps the node out: {exc}"
    except SchedulerError as exc:
        return f"The scheduler could not be told to give the node work: {exc}"
    return ""
