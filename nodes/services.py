"""Lifecycle verbs: the only road to a change of a node's state.

Every verb locks the node row, checks the state machine, applies the transition,
saves, writes the history row in the same transaction, and queues follow-up
work only once that transaction has committed. Views, the API, admin and tasks
all call these functions; none of them touches ``Node.state``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.utils import timezone
from django_fsm import TransitionNotAllowed, can_proceed, has_transition_perm

# Defined below every app so the API's exception handler can answer them without importing nodes.
from nodewarden.errors import ReasonRequired, TransitionForbidden

from . import followups
from .choices import ActorKind, EventKind, GpuHealth, MaintenanceWork, NodeState
from .models import GPU, OPERATE, STATE_CHANGE_KINDS, Node, NodeEvent

User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Actor:
    """Who or what acts: a user, or a system component such as ``system:policy``."""

    user: Any = None
    component: str = ""

    @classmethod
    def system(cls, component: str) -> Actor:
        return cls(component=component)

    @property
    def name(self) -> str:
        return self.user.get_username() if self.user is not None else f"system:{self.component}"

    @property
    def kind(self) -> str:
        return ActorKind.USER if self.user is not None else ActorKind.SYSTEM


def clean_reason(reason: str | None) -> str:
    """The reason every audited change must carry, stripped; ReasonRequired (a 400) if empty or
    if it holds a NUL character, which PostgreSQL text cannot store."""
    reason = (reason or "").strip()
    if not reason:
        raise ReasonRequired("A reason is required.")
    if "\x00" in reason:
        raise ReasonRequired("A reason may not contain a NUL character.")
    return reason


def _transition(
    node_id: int,
    name: str,
    *,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
    kind: str = EventKind.TRANSITION,
    args: tuple[Any, ...] = (),
) -> NodeEvent:
    """Run transition ``name`` on a node under a row lock and record it.

    Raises ``Node.DoesNotExist``, ``TransitionNotAllowed`` (with a message naming
    the state), ``TransitionForbidden`` or ``ReasonRequired``; in every such case
    nothing is written.
    """
    reason = clean_reason(reason)
    with transaction.atomic():
        # The row lock serialises concurrent verbs on PostgreSQL; on SQLite the
        # ConcurrentTransitionMixin's compare-and-swap UPDATE is the guard.
        node = Node.objects.select_for_update().get(pk=node_id)
        method = getattr(node, name)
        source = node.state
        if not can_proceed(method):
            label = NodeState(source).label
            raise TransitionNotAllowed(f"Cannot {name.replace('_', ' ')} a node in state {label!r}.")
        if actor.user is not None and not has_transition_perm(method, actor.user):
            raise TransitionForbidden(f"{actor.name} may not {name.replace('_', ' ')} nodes.")
        method(*args)
        node.state_changed_at = timezone.now()
        node.save(update_fields=["state", "state_changed_at", "is_revalidation", "last_updated"])
        event = NodeEvent.objects.create(
            node=node,
            hostname=node.hostname,
            kind=kind,
            transition=name,
            source_state=source,
            target_state=node.state,
            reason=reason,
            actor=actor.user,
            actor_kind=actor.kind,
            actor_name=actor.name,
            correlation_id=correlation_id,
            details=details or {},
            created=node.state_changed_at,
        )
        followups.state_changed(event)  # derived rows (reports' outages) in this transaction
        if followups.has_followups(name):  # a task (and its Run row) only where a handler answers
            _queue_followup(event, transition_meta(name).get("queue", "default"))
    return event


class _Followups:
    """One ``on_commit`` callback for the follow-ups of every transition a transaction records on one
    queue: one task for them all (a batch's cordons: the first one's reaction carries out the
    others', which then cost a read each, not a task each). Django drops it, ids and all, when a
    savepoint it was registered under rolls back; an id queued inside a savepoint that rolls back
    while the batch lives is still handed over, and its task finds no event ("gone")."""

    def __init__(self, queue: str, event_id: int) -> None:
        self.queue = queue
        self.event_ids = [event_id]
        self.ran = False  # a test's captured callbacks run before the (test's) transaction ends

    def __call__(self) -> None:
        from .tasks import run_transition_followup, run_transition_followups

        self.ran = True
        if len(self.event_ids) == 1:
            run_transition_followup.apply_async(args=(self.event_ids[0],), queue=self.queue)
        else:
            run_transition_followups.apply_async(args=(self.event_ids,), queue=self.queue)


def _queue_followup(event: NodeEvent, queue: str) -> None:
    """Add the event to this transaction's follow-ups for ``queue``, or start them (``on_commit``)."""
    # Django keeps (savepoint ids, callback, robust) per on_commit. A batch still there depends only on
    # savepoints still open (the others were released), all of which enclose this event too.
    for entry in connection.run_on_commit:
        callback = entry[1]
        if isinstance(callback, _Followups) and callback.queue == queue and not callback.ran:
            callback.event_ids.append(event.pk)
            return
    transaction.on_commit(_Followups(queue, event.pk))


def transition_meta(name: str) -> dict[str, Any]:
    """The ``custom`` metadata a transition declares on the model (label, queue, style)."""
    meta = getattr(Node, name)._django_fsm
    first = next(iter(meta.transitions.values()))
    return dict(first.custom)


# --- One function per verb ------------------------------------------------
def _verb(name: str) -> Callable[..., NodeEvent]:
    def verb(
        node_id: int, *, actor: Actor, reason: str, details: dict[str, Any] | None = None, correlation_id: str = ""
    ) -> NodeEvent:
        return _transition(node_id, name, actor=actor, reason=reason, details=details, correlation_id=correlation_id)

    verb.__name__ = verb.__qualname__ = name
    verb.__doc__ = getattr(Node, name).__doc__
    return verb


start_initialization = _verb("start_initialization")
mark_onboard = _verb("mark_onboard")
start_validation = _verb("start_validation")
revalidate = _verb("revalidate")
pass_firmware = _verb("pass_firmware")
pass_inventory_check = _verb("pass_inventory_check")
pass_burn_in = _verb("pass_burn_in")
pass_fabric_check = _verb("pass_fabric_check")
_release_to_production = _verb("release_to_production")


def release_to_production(
    node_id: int, *, actor: Actor, reason: str, details: dict[str, Any] | None = None, correlation_id: str = ""
) -> NodeEvent:
    """All Day 1 stages passed: the node serves again, and its suspect GPUs passed with it, so they
    are healthy again (in the same transaction, one GPU history row each). Fenced GPUs stay fenced:
    an operator fenced them, an operator clears them."""
    with transaction.atomic():
        event = _release_to_production(
            node_id, actor=actor, reason=reason, details=details, correlation_id=correlation_id
        )
        clear_suspect_gpus(node_id, actor=actor, reason=f"Passed validation: {event.reason}")
    return event


fail_validation = _verb("fail_validation")
request_drain = _verb("request_drain")
cancel_drain = _verb("cancel_drain")
start_draining = _verb("start_draining")


# --- Where a drain lands: maintenance (an operator's plan) or triage (findings) ------------------
# The verbs by which an operator plans a node's way out of production. A user's plain drain is
# planned work too; the same verbs run by the system (remediation, a GPU fence) answer findings.
PLANNED_DRAINS = ("start_maintenance", "request_drain", "start_draining")
DrainAwaiter = Callable[[int], str | None]
DRAIN_AWAITERS: list[DrainAwaiter] = []


def awaits_drain(fn: DrainAwaiter) -> DrainAwaiter:
    """Register ``fn(node_id)``: why another app waits for this node's drain to act on it (an open
    remediation's rung, a re-role), or None. Such a drain ends in triage, where they pick it up;
    the apps above nodes register in their ``AppConfig.ready`` (nodes never imports them)."""
    DRAIN_AWAITERS.append(fn)
    return fn


def planned_maintenance(node_id: int) -> NodeEvent | None:
    """The operator's planned drain or maintenance this node's way out of production is for: the
    latest state change out of production, if it is ``start_maintenance`` or a user's plain drain,
    and no app awaits the drain (``awaits_drain``). None when findings took it out. Two queries."""
    leave = (
        NodeEvent.objects.filter(node_id=node_id, source_state=NodeState.PRODUCTION, kind__in=STATE_CHANGE_KINDS)
        .exclude(target_state=NodeState.PRODUCTION)
        .order_by("-created", "-id")
        .first()
    )
    if leave is None or leave.transition not in PLANNED_DRAINS:
        return None
    if leave.transition != "start_maintenance" and leave.actor_kind != ActorKind.USER:
        return None
    if any(awaiter(node_id) for awaiter in DRAIN_AWAITERS):
        return None
    return leave


def complete_drain(
    node_id: int, *, actor: Actor, reason: str, details: dict[str, Any] | None = None, correlation_id: str = ""
) -> NodeEvent:
    """No customer work left on the node: into maintenance when an operator planned the drain
    (``planned_maintenance``), into triage when findings took it out (or an app awaits the drain)."""
    planned = planned_maintenance(node_id)
    if planned is not None:
        details = {**(details or {}), "maintenance_started_by": planned.pk}
    return _transition(
        node_id,
        "complete_drain",
        actor=actor,
        reason=reason,
        details=details,
        correlation_id=correlation_id,
        args=(planned is not None,),
    )


start_maintenance = _verb("start_maintenance")


def end_maintenance(
    node_id: int,
    *,
    actor: Actor,
    reason: str,
    work: str = MaintenanceWork.OTHER,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
) -> NodeEvent:
    """The operator's work on a node in maintenance is done: ``work`` (``MaintenanceWork``) says what
    was done and picks the re-validation plan the node walks back to production (the Day 1 stages,
    ``validation.choices.MAINTENANCE_PLANS``). Without it (the generic transition endpoint): "other",
    the full plan. Raises ValueError for an unknown ``work`` (nothing written)."""
    if work not in MaintenanceWork.values:
        choices = ", ".join(MaintenanceWork.values)
        raise ValueError(f"Unknown maintenance work {work!r}: one of {choices}.")
    return _transition(
        node_id,
        "end_maintenance",
        actor=actor,
        reason=reason,
        details={**(details or {}), "maintenance_work": work},
        correlation_id=correlation_id,
    )


cordon = _verb("cordon")
start_remediation = _verb("start_remediation")
fail_remediation = _verb("fail_remediation")
send_to_repair = _verb("send_to_repair")
send_to_rma = _verb("send_to_rma")
decommission = _verb("decommission")


def force_state(node_id: int, target: str, *, actor: Actor, reason: str, correlation_id: str = "") -> NodeEvent:
    """Put a node into any state, past the state machine's rules; recorded as a forced change."""
    if target not in NodeState.values:
        raise ValueError(f"Unknown state {target!r}.")
    return _transition(
        node_id,
        "force_state",
        actor=actor,
        reason=reason,
        kind=EventKind.FORCED,
        correlation_id=correlation_id,
        args=(target,),
        details={"forced_target": target},
    )


# Verbs an operator may run by name from the portal and the API (force_state is admin-only).
VERBS: dict[str, Callable[..., NodeEvent]] = {
    fn.__name__: fn
    for fn in (
        start_initialization,
        mark_onboard,
        start_validation,
        revalidate,
        pass_firmware,
        pass_inventory_check,
        pass_burn_in,
        pass_fabric_check,
        release_to_production,
        fail_validation,
        request_drain,
        cancel_drain,
        start_draining,
        complete_drain,
        start_maintenance,
        end_maintenance,
        cordon,
        start_remediation,
        fail_remediation,
        send_to_repair,
        send_to_rma,
        decommission,
    )
}


def perform(node_id: int, name: str, *, actor: Actor, reason: str, correlation_id: str = "") -> NodeEvent:
    """Run the verb called ``name``; unknown names are refused like disallowed transitions."""
    verb = VERBS.get(name)
    if verb is None:
        raise TransitionNotAllowed(f"Unknown transition {name!r}.")
    return verb(node_id, actor=actor, reason=reason, correlation_id=correlation_id)


def available_transitions(node: Node, user: Any) -> list[dict[str, Any]]:
    """Transitions this user may run on this node now, for buttons and the API."""
    result = []
    for t in node.get_available_user_state_transitions(user):
        if t.custom.get("admin_only"):
            continue
        target = t.target
        if not isinstance(target, str):  # a transition whose target depends on why: complete_drain
            target = NodeState.MAINTENANCE if planned_maintenance(node.pk) else NodeState.TRIAGE
        result.append(
            {
                "name": t.name,
                "label": t.custom["label"],
                "target": target,
                "style": t.custom.get("style", "primary"),
                "own_form": bool(t.custom.get("own_form")),
            }
        )
    return result


def record_event(
    node_id: int,
    kind: str,
    *,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
    node: Node | None = None,
) -> NodeEvent:
    """Append a finding, action or operator note to a node's history (no change of state). ``node``:
    the node as the caller has just read it (the row's hostname and state copy), saving a read."""
    if kind not in (EventKind.FINDING, EventKind.ACTION, EventKind.NOTE):
        raise ValueError(f"{kind!r} is not a plain event kind.")
    reason = clean_reason(reason)
    if node is None or node.pk != node_id:
        node = Node.objects.only("id", "hostname", "state").get(pk=node_id)
    event = NodeEvent.objects.create(
        node=node,
        hostname=node.hostname,
        kind=kind,
        source_state=node.state,
        reason=reason,
        actor=actor.user,
        actor_kind=actor.kind,
        actor_name=actor.name,
        correlation_id=correlation_id,
        details=details or {},
    )
    if kind == EventKind.ACTION:
        followups.action_recorded(event)  # after commit: shown on the node in its scheduler
    return event


# --- A GPU's own health -----------------------------------------------------
# Which health each verb may start from; the node's lifecycle state is not touched by any of them.
GPU_VERBS: dict[str, tuple[tuple[str, ...], str]] = {
    "mark_gpu_suspect": ((GpuHealth.HEALTHY,), GpuHealth.SUSPECT),
    "fence_gpu": ((GpuHealth.HEALTHY, GpuHealth.SUSPECT), GpuHealth.FENCED),
    "clear_gpu": ((GpuHealth.SUSPECT, GpuHealth.FENCED), GpuHealth.HEALTHY),
}


def _change_gpu_health(
    node_id: int,
    index: int,
    verb: str,
    *,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
) -> NodeEvent:
    """Move GPU ``index`` of a node from one health to another under a row lock, with its history
    row (kind ``gpu``; the GPU's index and UUID in ``details``) in the same transaction.

    Raises ``GPU.DoesNotExist``, ``ReasonRequired``, ``TransitionForbidden`` (a user without the
    operate permission) or ``TransitionNotAllowed`` (the GPU's health does not allow the verb);
    nothing is written then.
    """
    reason = clean_reason(reason)
    sources, target = GPU_VERBS[verb]
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise TransitionForbidden(f"{actor.name} may not {verb.replace('_', ' ')}s.")
    with transaction.atomic():
        gpu = GPU.objects.select_for_update().select_related("node").get(node_id=node_id, index=index)
        if gpu.health not in sources:
            label = GpuHealth(gpu.health).label.lower()
            raise TransitionNotAllowed(f"Cannot {verb.replace('_', ' ')} {index}: it is {label}.")
        source = gpu.health
        gpu.health, gpu.health_changed_at, gpu.health_reason = target, timezone.now(), reason
        gpu.save(update_fields=["health", "health_changed_at", "health_reason"])
        node = gpu.node
        event = NodeEvent.objects.create(
            node=node,
            hostname=node.hostname,
            kind=EventKind.GPU,
            transition=verb,
            source_state=node.state,  # the node's own state, unchanged by a GPU's
            reason=reason,
            actor=actor.user,
            actor_kind=actor.kind,
            actor_name=actor.name,
            correlation_id=correlation_id,
            details={**(details or {}), "gpu_index": index, "gpu_uuid": gpu.uuid, "from": source, "to": target},
            created=gpu.health_changed_at,
        )
        followups.action_recorded(event)  # after commit: shown on the node in its scheduler
        return event


def mark_gpu_suspect(
    node_id: int,
    index: int,
    *,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
) -> NodeEvent | None:
    """A finding names this GPU: watch it. Idempotent: None (nothing written) when the GPU is
    already suspect or fenced, so a burst of findings writes one history row, not one each."""
    try:
        return _change_gpu_health(
            node_id,
            index,
            "mark_gpu_suspect",
            actor=actor,
            reason=reason,
            details=details,
            correlation_id=correlation_id,
        )
    except TransitionNotAllowed:
        return None


def fence_gpu(
    node_id: int,
    index: int,
    *,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None = None,
    correlation_id: str = "",
) -> NodeEvent:
    """Take one GPU out of service without draining its node; the reason is required and the
    node's own state does not change. After commit the node's scheduler is told
    (``followups.gpu_fence_changed``): it fences that GPU, or the node is drained where it cannot."""
    with transaction.atomic():
        event = _change_gpu_health(
            node_id, index, "fence_gpu", actor=actor, reason=reason, details=details, correlation_id=correlation_id
        )
        transaction.on_commit(lambda: followups.gpu_fence_changed(node_id, [index], fenced=True, reason=event.reason))
    return event


def clear_gpu(node_id: int, index: int, *, actor: Actor, reason: str, correlation_id: str = "") -> NodeEvent:
    """The GPU is trusted again (healthy), from suspect or fenced; a fenced one is given back to its
    node's scheduler after commit. A node drained in its stead stays drained: an operator cancels it."""
    with transaction.atomic():
        event = _change_gpu_health(
            node_id, index, "clear_gpu", actor=actor, reason=reason, correlation_id=correlation_id
        )
        if event.details.get("from") == GpuHealth.FENCED:
            transaction.on_commit(
                lambda: followups.gpu_fence_changed(node_id, [index], fenced=False, reason=event.reason)
            )
    return event


def clear_suspect_gpus(node_id: int, *, actor: Actor, reason: str) -> list[NodeEvent]:
    """Clear every suspect GPU of a node (not the fenced ones): one history row per GPU."""
    indexes = list(GPU.objects.filter(node_id=node_id, health=GpuHealth.SUSPECT).values_list("index", flat=True))
    return [clear_gpu(node_id, index, actor=actor, reason=reason) for index in indexes]


def usable_gpu_count(gpus: Any) -> int:
    """How many of these GPUs work may run on (not fenced); reads an already fetched list."""
    return sum(1 for gpu in gpus if gpu.is_usable)
