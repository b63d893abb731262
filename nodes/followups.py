"""What a transition causes, declared in one place: what happens after it commits, keyed by
transition name, and the rows other apps derive from it, kept in step inside its transaction.

A handler gets the node (locked by nobody; it calls services for any change of
state) and the triggering event, and returns a one-line summary. Apps register
their handlers here (Day 0 provisioning, Day 1 stages, remediation, personas);
several may answer one transition, in registration order.

What a transition asks of the node's workload scheduler (cordon, drain, evict, resume) and
the drain road (drain pending -> draining -> triage as the scheduler reports the node idle) are
declared and run in one place: ``schedulers.reactions``. Its handler runs even when the node
has moved on since the transition (``even_if_moved_on``): a cordon followed at once by the
start of a remediation must still evict.

Rows another app derives from the history or from a node's placement (reports: outage rows,
rolled-up day counts) are not follow-up work: they are rewritten in the transaction that
records the change, so they never lag it. ``nodes.services`` records every change of state and
calls ``state_changed``; the admin's inventory edit calls ``cluster_changed``. The deriving app
registers its recorders in its ``AppConfig.ready`` (nodes sits below it and never imports it).

A GPU fenced or given back (``fence_gpu``, ``clear_gpu`` of a fenced GPU) is not a transition: it
reaches the node's scheduler after commit through ``gpu_fence_changed``, which the schedulers app
fills (``schedulers.reactions.react_to_gpu_fence``).

Actions are not transitions either: a history row of kind ``action`` (a remediation rung's
outcome, an agent command sent, a check queued, a repair ticket's step) or ``gpu`` (a GPU marked
suspect, fenced or cleared). What one causes after commit is registered here (``on_action``);
``nodes.services`` calls ``action_recorded`` for every such row it writes. The schedulers app
shows each on the node where the scheduler can (a Kubernetes ``NodewardenAction`` Event).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.db import transaction

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


def has_followups(name: str) -> bool:
    """Whether any handler answers transition ``name``: a transition none answers queues no task."""
    return bool(FOLLOWUPS.get(name) or EVEN_IF_MOVED_ON.get(name))


def run_followups(node: Node, event: NodeEvent, *, moved_on: bool = False) -> str | None:
    """Run the handlers of the event's transition (only those registered ``even_if_moved_on`` when
    the node has left the transition's target state); their summaries joined, or None if none ran."""
    handlers = EVEN_IF_MOVED_ON.get(event.transition, []) + ([] if moved_on else FOLLOWUPS.get(event.transition, []))
    if not handlers:
        return None
    return " ".join(summary for summary in (handler(node, event) for handler in handlers) if summary)


# --- Kept in step inside the transaction ------------------------------------------------------
StateChangeRecorder = Callable[[NodeEvent], None]
ON_STATE_CHANGE: list[StateChangeRecorder] = []
PlacementRecorder = Callable[[Node], None]
ON_CLUSTER_CHANGE: list[PlacementRecorder] = []


def on_state_change(fn: StateChangeRecorder) -> StateChangeRecorder:
    """Register ``fn(event)``, run inside the transaction that records each change of state."""
    ON_STATE_CHANGE.append(fn)
    return fn


def on_cluster_change(fn: PlacementRecorder) -> PlacementRecorder:
    """Register ``fn(node)``, run inside the transaction that moves a node to another cluster."""
    ON_CLUSTER_CHANGE.append(fn)
    return fn


# --- After commit: a GPU fenced or given back ------------------------------------------------------
GpuFenceReaction = Callable[[int, list[int], bool, str], None]
ON_GPU_FENCE_CHANGE: list[GpuFenceReaction] = []


def on_gpu_fence_change(fn: GpuFenceReaction) -> GpuFenceReaction:
    """Register ``fn(node_id, indices, fenced, reason)``, run after a GPU fence or its clearing commits
    (the schedulers app tells the node's scheduler; nodes sits below it and never imports it)."""
    ON_GPU_FENCE_CHANGE.append(fn)
    return fn


def gpu_fence_changed(node_id: int, indices: list[int], *, fenced: bool, reason: str) -> None:
    """GPUs of a node were fenced (``fenced``) or given back, and that has committed."""
    for react in ON_GPU_FENCE_CHANGE:
        react(node_id, indices, fenced, reason)


ActionReaction = Callable[[NodeEvent], None]
ON_ACTION: list[ActionReaction] = []


def on_action(fn: ActionReaction) -> ActionReaction:
    """Register ``fn(event)``, run after the commit of each action or GPU health row (the schedulers app
    posts it on the node; nodes sits below it and never imports it)."""
    ON_ACTION.append(fn)
    return fn


def action_recorded(event: NodeEvent) -> None:
    """An action or GPU health row was just saved: its reactions run once the transaction commits."""
    for react in ON_ACTION:
        transaction.on_commit(partial(react, event))


def state_changed(event: NodeEvent) -> None:
    """A change of state was recorded (its NodeEvent just saved): keep the derived rows in step."""
    for record in ON_STATE_CHANGE:
        record(event)


def cluster_changed(node: Node) -> None:
    """A node was saved with another cluster or tenant, or deleted: its derived rows follow it."""
    for record in ON_CLUSTER_CHANGE:
        record(node)
