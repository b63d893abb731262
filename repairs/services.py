"""Repair tickets and RMA cases: one function per verb, the only road to a change of either.

Every verb checks the actor's permission (``nodes.operate_node`` for users) and the reason,
locks the node row and then the ticket or case, applies the declared transition, saves, and
in the same transaction writes the ``RepairEvent``, the node's history row and the webhook
deliveries (sent once it commits). Opening may move the node to REPAIR or RMA; resolving the
node's last ticket or closing its last case sends it back through Day 1 (``revalidate``): no
node returns to customers untested. Cancelling never moves the node: an operator decides.

Refusals change nothing: ``RepairForbidden`` (403), ``ReasonRequired`` and Django's
``ValidationError`` (400), ``RepairConflict`` (409), ``DoesNotExist`` (404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction
from django_fsm import TransitionNotAllowed, can_proceed

from nodes import services as node_services
from nodes.choices import EventKind, NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor, clean_reason, record_event
from nodewarden.errors import TransitionForbidden

from . import webhooks
from .choices import (
    OPEN_RMA_STATES,
    OPEN_TICKET_STATES,
    RMA_VERB_EVENTS,
    STATE_LABELS,
    TICKET_VERB_EVENTS,
    RmaOutcome,
)
from .models import RepairEvent, RepairTicket, RmaCase

S = NodeState
Record = TypeVar("Record", RepairTicket, RmaCase)
PAST = {
    "open": "opened",
    "start": "started",
    "resolve": "resolved",
    "cancel": "cancelled",
    "ship": "shipped",
    "receive": "received",
    "close": "closed",
}


class RepairConflict(TransitionNotAllowed):
    """The ticket's, the case's or the node's state does not allow this verb (409)."""


class RepairForbidden(TransitionForbidden):
    """The acting user may not operate nodes (403)."""


# --- Tickets ----------------------------------------------------------------------
def open_repair_ticket(
    node_id: int,
    *,
    component: str,
    what: str,
    actor: Actor,
    reason: str,
    finding_id: int | None = None,
    remediation_id: int | None = None,
    move_node: bool = True,
    assignee: str = "",
    notes: str = "",
) -> RepairTicket:
    """Open a technician's ticket on a node; with ``move_node``, a node in triage or remediation
    goes to REPAIR (``send_to_repair``) in the same transaction."""
    _require_operator(actor, "open repair tickets")
    reason = clean_reason(reason)
    text = _clean_fields(
        component=(component, 200, True),
        what=(what, 10_000, True),
        assignee=(assignee, 150, False),
        notes=(notes, 10_000, False),
    )
    with transaction.atomic():
        # of=self: PostgreSQL cannot lock the nullable side (rack) of the outer join.
        node = Node.objects.select_for_update(of=("self",)).select_related("site", "rack").get(pk=node_id)
        _refuse_decommissioned(node)
        ticket = RepairTicket.objects.create(
            node=node,
            hostname=node.hostname,
            site=node.site.slug,
            rack=node.rack.name if node.rack else "",
            rack_unit=node.rack_unit,
            opened_by=actor.user,
            opened_by_name=actor.name,
            finding_id=finding_id,
            remediation_id=remediation_id,
            **text,
        )
        _record(ticket, "open", "", actor, reason)
        if move_node and node.state in (S.TRIAGE, S.REMEDIATING):
            node_services.send_to_repair(
                node.pk,
                actor=actor,
                reason=f"Repair ticket #{ticket.pk}: {reason}",
                details={"repair_ticket": ticket.pk},
            )
    return ticket


def start_repair(ticket_id: int, *, actor: Actor, reason: str, assignee: str = "") -> RepairTicket:
    """A technician starts work (optionally naming who)."""
    text = _clean_fields(assignee=(assignee, 150, False))

    def assign(ticket: RepairTicket) -> list[str]:
        if text["assignee"]:
            ticket.assignee = text["assignee"]
        return ["assignee"]

    return _change(RepairTicket, ticket_id, "start", actor=actor, reason=reason, prepare=assign)


def resolve_repair(ticket_id: int, *, actor: Actor, reason: str) -> RepairTicket:
    """The work is done: the ticket is resolved and, if the node is in REPAIR and this was its
    last open ticket, the node walks Day 1 again (``revalidate``)."""
    with transaction.atomic():
        ticket = _change(
            RepairTicket, ticket_id, "resolve", actor=actor, reason=reason, prepare=lambda t: ["resolved_at"]
        )
        _release_node(
            ticket.node_id,
            actor,
            reason=f"Repair ticket #{ticket.pk} resolved: {clean_reason(reason)}",
            details={"repair_ticket": ticket.pk},
        )
    return ticket


def cancel_repair(ticket_id: int, *, actor: Actor, reason: str) -> RepairTicket:
    """The ticket is not needed; the node stays where it is."""
    return _change(RepairTicket, ticket_id, "cancel", actor=actor, reason=reason)


# --- RMA cases --------------------------------------------------------------------
def open_rma_case(
    node_id: int,
    *,
    vendor: str,
    part: str,
    failed_serial: str,
    actor: Actor,
    reason: str,
    move_node: bool = True,
    vendor_case_number: str = "",
    notes: str = "",
) -> RmaCase:
    """Open a return to the vendor; with ``move_node``, a node in triage or repair goes to RMA
    (``send_to_rma``) in the same transaction."""
    _require_operator(actor, "open RMA cases")
    reason = clean_reason(reason)
    text = _clean_fields(
        vendor=(vendor, 100, True),
        part=(part, 200, True),
        failed_serial=(failed_serial, 100, True),
        vendor_case_number=(vendor_case_number, 100, False),
        notes=(notes, 10_000, False),
    )
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        _refuse_decommissioned(node)
        case = RmaCase.objects.create(
            node=node, hostname=node.hostname, opened_by=actor.user, opened_by_name=actor.name, **text
        )
        _record(case, "open", "", actor, reason)
        if move_node and node.state in (S.TRIAGE, S.REPAIR):
            node_services.send_to_rma(
                node.pk, actor=actor, reason=f"RMA #{case.pk}: {reason}", details={"rma_case": case.pk}
            )
    return case


def ship_rma(case_id: int, *, actor: Actor, reason: str, vendor_case_number: str = "") -> RmaCase:
    """The failed part left for the vendor (record the vendor's case number if known now)."""
    text = _clean_fields(vendor_case_number=(vendor_case_number, 100, False))

    def note_case_number(case: RmaCase) -> list[str]:
        if text["vendor_case_number"]:
            case.vendor_case_number = text["vendor_case_number"]
        return ["vendor_case_number", "shipped_at"]

    return _change(RmaCase, case_id, "ship", actor=actor, reason=reason, prepare=note_case_number)


def receive_rma(case_id: int, *, replacement_serial: str, outcome: str, actor: Actor, reason: str) -> RmaCase:
    """The vendor answered: ``outcome`` and the serial of the part that came back (required when replaced)."""
    if outcome not in RmaOutcome.values:
        raise ValidationError({"outcome": f"Unknown outcome {outcome!r}; one of {', '.join(RmaOutcome.values)}."})
    text = _clean_fields(replacement_serial=(replacement_serial, 100, outcome == RmaOutcome.REPLACED))
    return _change(
        RmaCase,
        case_id,
        "receive",
        actor=actor,
        reason=reason,
        args=(outcome, text["replacement_serial"]),
        prepare=lambda c: ["outcome", "replacement_serial", "returned_at"],
    )


def close_rma(case_id: int, *, actor: Actor, reason: str) -> RmaCase:
    """The part is back in the node: the case is closed and, if the node is in RMA with no other
    open case and no open ticket, the node walks Day 1 again (``revalidate``)."""
    with transaction.atomic():
        case = _change(RmaCase, case_id, "close", actor=actor, reason=reason, prepare=lambda c: ["closed_at"])
        _release_node(
            case.node_id, actor, reason=f"RMA #{case.pk} closed: {clean_reason(reason)}", details={"rma_case": case.pk}
        )
    return case


def cancel_rma(case_id: int, *, actor: Actor, reason: str) -> RmaCase:
    """No return after all; the node stays where it is."""
    return _change(RmaCase, case_id, "cancel", actor=actor, reason=reason, prepare=lambda c: ["closed_at"])


# --- Shared machinery -----------------------------------------------------------------
def _change(
    model: type[Record],
    pk: int,
    name: str,
    *,
    actor: Actor,
    reason: str,
    args: tuple[Any, ...] = (),
    prepare: Callable[[Record], list[str]] | None = None,
) -> Record:
    """Run transition ``name`` on a ticket or case under the node's and its own row lock, and record it."""
    _require_operator(actor, f"{name} {_noun(model)}s")
    reason = clean_reason(reason)
    with transaction.atomic():
        node_id = model.objects.values_list("node_id", flat=True).get(pk=pk)
        # The node first, then the record: every verb on a node's tickets and cases queues on
        # this lock, so "is another ticket open?" is answered by the one that changes the node.
        Node.objects.select_for_update().filter(pk=node_id).values_list("pk", flat=True).get()
        obj = model.objects.select_for_update().get(pk=pk)
        method = getattr(obj, name)
        source = obj.state
        if not can_proceed(method):
            raise RepairConflict(f"Cannot {name} {_noun(model)} #{pk}: it is {STATE_LABELS[source].lower()}.")
        method(*args)
        fields: list[str] = prepare(obj) if prepare else []
        obj.save(update_fields=["state", "updated", *fields])
        _record(obj, name, source, actor, reason)
    return obj


def _record(obj: RepairTicket | RmaCase, verb: str, source: str, actor: Actor, reason: str) -> RepairEvent:
    """The change's own row, the node's history row and the webhook deliveries, in the caller's transaction."""
    ticket: RepairTicket | None
    rma_case: RmaCase | None
    if isinstance(obj, RepairTicket):
        ticket, rma_case = obj, None
        subject, key = f"Repair ticket #{obj.pk} ({obj.component})", "repair_ticket"
    else:
        ticket, rma_case = None, obj
        subject, key = f"RMA #{obj.pk} ({obj.vendor} {obj.part}, serial {obj.failed_serial})", "rma_case"
    event = RepairEvent.objects.create(
        ticket=ticket,
        rma_case=rma_case,
        node_id=obj.node_id,
        hostname=obj.hostname,
        verb=verb,
        from_state=source,
        to_state=obj.state,
        actor=actor.user,
        actor_name=actor.name,
        reason=reason,
    )
    record_event(
        obj.node_id,
        EventKind.ACTION,
        actor=actor,
        reason=f"{subject} {PAST[verb]}: {reason}",
        details={key: obj.pk, "from": source, "to": obj.state},
    )
    name = (TICKET_VERB_EVENTS if ticket is not None else RMA_VERB_EVENTS)[verb]
    webhooks.queue_event(name, webhooks.payload(name, obj, event))
    return event


def _release_node(node_id: int, actor: Actor, *, reason: str, details: dict[str, Any]) -> bool:
    """Send the node back through Day 1 when nothing holds it any more: in REPAIR, no open
    ticket; in RMA, no open case and no open ticket. The node row is locked by the caller."""
    state = Node.objects.values_list("state", flat=True).get(pk=node_id)
    if state not in (S.REPAIR, S.RMA):
        return False
    if RepairTicket.objects.filter(node_id=node_id, state__in=OPEN_TICKET_STATES).exists():
        return False
    if state == S.RMA and RmaCase.objects.filter(node_id=node_id, state__in=OPEN_RMA_STATES).exists():
        return False
    node_services.revalidate(node_id, actor=actor, reason=reason, details=details)
    return True


def _require_operator(actor: Actor, what: str) -> None:
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise RepairForbidden(f"{actor.name} may not {what}.")


def _refuse_decommissioned(node: Node) -> None:
    if node.state == S.DECOMMISSIONED:
        raise RepairConflict(f"{node.hostname} is decommissioned.")


def _clean_fields(**fields: tuple[str | None, int, bool]) -> dict[str, str]:
    """Strip text fields; required ones must not be blank; none may be too long or hold a NUL."""
    errors, clean = {}, {}
    for name, (value, max_length, required) in fields.items():
        value = (value or "").strip()
        if required and not value:
            errors[name] = "This field is required."
        elif len(value) > max_length:
            errors[name] = f"At most {max_length} characters."
        elif "\x00" in value:
            errors[name] = "May not contain a NUL character."
        clean[name] = value
    if errors:
        raise ValidationError(errors)
    return clean


def _noun(model: type[RepairTicket] | type[RmaCase]) -> str:
    return "ticket" if model is RepairTicket else "RMA case"
