"""What happens after a transition commits, keyed by transition name.

A handler gets the node (locked by nobody; it calls services for any change of
state) and the triggering event, and returns a one-line summary. Apps register
their handlers here (Day 0 provisioning, Day 1 stages, remediation, personas);
several may answer one transition, in registration order.

What a transition asks of the node's workload scheduler (cordon, drain, evict, resume) and
the drain road (drain pending -> draining -> triage as the scheduler reports the node idle) are
declared and run in one place: ``schedulers.reactions``. Its handler runs even when the node
has moved on since the transition (``even_if_moved_on``): a cordon followed at once by the
start of a remediation must still evict.
"""

from __future__ import annotations

from collections.abc import Callable

from .models import Node, NodeEvent

Handler = Callable[[Node, NodeEvent], str]
FOLLOWUPS: dict[str, list[Handler]] = {}
# Handlers that run even when the node has left the transition's target state since.
EVEN_IF_MOVED_ON: dict[str, list[Handler]] = {}


def followup(name: str, *, even_if_moved_on: bool = False) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        (EVEN_IF_MOVED_ON if even_if_moved_on else FOLLOWUPS).setdefault(name, []).append(fn)
        return fn

    return register


def run_followups(node: Node, event: NodeEvent, *, moved_on: bool = False) -> str | None:
    """Run the handlers of the event's transition (only those registered ``even_if_moved_on`` when
    the node has left the transition's target state); their summaries joined, or None if none ran."""
    handlers = EVEN_IF_MOVED_ON.get(event.transition, []) + ([] if moved_on else FOLLOWUPS.get(event.transition, []))
    if not handlers:
        return None
    return " ".join(summary for summary in (handler(node, event) for handler in handlers) if summary)
