"""Repair tickets and RMA cases change only through their verbs: each moves the record (and,
where it says so, the node), writes its own history and the node's, and refuses cleanly."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from nodewarden.errors import ReasonRequired
from repairs import services
from repairs.choices import RmaState, TicketState, WebhookEvent
from repairs.models import RepairEvent, RepairTicket, RmaCase, WebhookDelivery, WebhookEndpoint
from repairs.services import RepairConflict, RepairForbidden

pytestmark = pytest.mark.django_db
S = NodeState


def node_state(node) -> str:  # type: ignore[no-untyped-def]
    node.refresh_from_db()
    return node.state


def history(node) -> list[NodeEvent]:  # type: ignore[no-untyped-def]
    return list(NodeEvent.objects.filter(node=node).order_by("created", "id"))


# --- Opening a ticket ---------------------------------------------------------------
def test_opening_a_ticket_on_a_node_in_triage_sends_it_to_repair_and_copies_its_place(node_in, ticket_on):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node, finding_id=17, remediation_id=4)
    assert ticket.state == TicketState.OPEN and node_state(node) == S.REPAIR
    assert (ticket.site, ticket.rack, ticket.rack_unit) == (node.site.slug, node.rack.name, 12)
    assert (ticket.hostname, ticket.opened_by_name, ticket.finding_id, ticket.remediation_id) == (
        node.hostname,
        "operator",
        17,
        4,
    )
    (event,) = ticket.events.all()
    assert (event.verb, event.from_state, event.to_state, event.actor_name) == ("open", "", "open", "operator")
    action, transition = history(node)
    assert action.kind == EventKind.ACTION and f"Repair ticket #{ticket.pk} (GPU 3" in action.reason
    assert action.details["repair_ticket"] == ticket.pk
    assert (transition.transition, transition.target_state) == ("send_to_repair", S.REPAIR)


def test_opening_a_ticket_during_remediation_also_sends_the_node_to_repair(node_in, ticket_on):
    node = node_in(S.REMEDIATING)
    ticket_on(node)
    assert node_state(node) == S.REPAIR


@pytest.mark.parametrize("state", [S.PRODUCTION, S.REPAIR, S.RMA, S.BURN_IN])
def test_opening_a_ticket_elsewhere_leaves_the_node_where_it_is(node_in, ticket_on, state):
    node = node_in(state)
    ticket_on(node)
    assert node_state(node) == state


def test_move_node_false_leaves_a_triaged_node_in_triage(node_in, ticket_on):
    node = node_in(S.TRIAGE)
    ticket_on(node, move_node=False)
    assert node_state(node) == S.TRIAGE


def test_the_place_is_kept_when_the_node_moves_later(node_in, ticket_on):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node)
    type(node).objects.filter(pk=node.pk).update(rack_unit=30)  # moved within the rack
    ticket.refresh_from_db()
    assert ticket.rack_unit == 12


def test_a_system_component_may_open_a_ticket(node_in):
    node = node_in(S.TRIAGE)
    ticket = services.open_repair_ticket(
        node.pk, component="HCA mlx5_2", what="Replace the HCA", actor=Actor.system("health"), reason="link flaps"
    )
    assert ticket.opened_by_name == "system:health" and ticket.opened_by is None
    assert node_state(node) == S.REPAIR


def test_it_refuses_to_open_without_permission_reason_or_component_and_writes_nothing(node_in, viewer, as_operator):
    node = node_in(S.TRIAGE)
    with pytest.raises(RepairForbidden):
        services.open_repair_ticket(node.pk, component="PSU 2", what="swap", actor=Actor(user=viewer), reason="x")
    with pytest.raises(ReasonRequired):
        services.open_repair_ticket(node.pk, component="PSU 2", what="swap", actor=as_operator, reason="  ")
    with pytest.raises(ValidationError) as err:
        services.open_repair_ticket(node.pk, component=" ", what="", actor=as_operator, reason="x")
    assert set(err.value.message_dict) == {"component", "what"}
    assert not RepairTicket.objects.exists() and not RepairEvent.objects.exists()
    assert node_state(node) == S.TRIAGE and not history(node)


def test_it_refuses_to_open_a_ticket_on_a_decommissioned_node(node_in, ticket_on):
    with pytest.raises(RepairConflict, match="decommissioned"):
        ticket_on(node_in(S.DECOMMISSIONED))
    assert not RepairTicket.objects.exists()


# --- Working a ticket ---------------------------------------------------------------
def test_start_puts_the_ticket_in_progress_with_its_assignee(node_in, ticket_on):
    ticket = ticket_on(node_in(S.TRIAGE), started=True)
    assert ticket.state == TicketState.IN_PROGRESS and ticket.assignee == "dc-tech-7"
    assert [e.verb for e in ticket.events.all()] == ["open", "start"]


def test_it_refuses_to_start_twice_or_resolve_an_unstarted_ticket(node_in, ticket_on, as_operator):
    ticket = ticket_on(node_in(S.TRIAGE))
    with pytest.raises(RepairConflict, match=r"Cannot resolve ticket .* it is open"):
        services.resolve_repair(ticket.pk, actor=as_operator, reason="done")
    services.start_repair(ticket.pk, actor=as_operator, reason="on it")
    with pytest.raises(RepairConflict, match="in progress"):
        services.start_repair(ticket.pk, actor=as_operator, reason="again")
    assert ticket.events.count() == 2


def test_resolving_the_last_ticket_sends_the_node_back_through_day_1(node_in, ticket_on, as_operator):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node, started=True)
    resolved = services.resolve_repair(ticket.pk, actor=as_operator, reason="GPU replaced")
    assert resolved.state == TicketState.RESOLVED and resolved.resolved_at is not None
    node.refresh_from_db()
    assert node.state == S.FIRMWARE_UPDATE and node.is_revalidation
    last = history(node)[-1]
    assert (last.transition, last.source_state, last.target_state) == ("revalidate", S.REPAIR, S.FIRMWARE_UPDATE)
    assert f"Repair ticket #{ticket.pk} resolved: GPU replaced" in last.reason


def test_the_node_stays_in_repair_while_another_ticket_is_open(node_in, ticket_on, as_operator):
    node = node_in(S.TRIAGE)
    gpu = ticket_on(node, started=True)
    psu = ticket_on(node, "PSU 2", started=True)
    services.resolve_repair(gpu.pk, actor=as_operator, reason="GPU replaced")
    assert node_state(node) == S.REPAIR
    services.resolve_repair(psu.pk, actor=as_operator, reason="PSU replaced")
    assert node_state(node) == S.FIRMWARE_UPDATE


def test_resolving_a_ticket_on_a_node_outside_repair_does_not_move_it(node_in, ticket_on, as_operator):
    node = node_in(S.PRODUCTION)
    ticket = ticket_on(node, "cable leaf01/3", started=True)
    services.resolve_repair(ticket.pk, actor=as_operator, reason="reseated")
    assert node_state(node) == S.PRODUCTION


def test_cancelling_leaves_the_node_in_repair_for_an_operator_to_decide(node_in, ticket_on, as_operator):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node)
    cancelled = services.cancel_repair(ticket.pk, actor=as_operator, reason="opened by mistake")
    assert cancelled.state == TicketState.CANCELLED and node_state(node) == S.REPAIR
    with pytest.raises(RepairConflict, match="cancelled"):
        services.cancel_repair(ticket.pk, actor=as_operator, reason="again")
    with pytest.raises(RepairConflict):
        services.start_repair(ticket.pk, actor=as_operator, reason="late")


def test_a_viewer_may_not_work_a_ticket_and_a_blank_reason_changes_nothing(node_in, ticket_on, viewer, as_operator):
    ticket = ticket_on(node_in(S.TRIAGE))
    for verb in (services.start_repair, services.resolve_repair, services.cancel_repair):
        with pytest.raises(RepairForbidden):
            verb(ticket.pk, actor=Actor(user=viewer), reason="x")
        with pytest.raises(ReasonRequired):
            verb(ticket.pk, actor=as_operator, reason="")
    ticket.refresh_from_db()
    assert ticket.state == TicketState.OPEN and ticket.events.count() == 1


def test_an_unknown_ticket_is_does_not_exist(as_operator, db):
    with pytest.raises(RepairTicket.DoesNotExist):
        services.start_repair(999_999, actor=as_operator, reason="x")


# --- RMA cases --------------------------------------------------------------------------
@pytest.mark.parametrize("state", [S.TRIAGE, S.REPAIR])
def test_opening_an_rma_case_sends_a_node_in_triage_or_repair_to_rma(node_in, case_on, state):
    node = node_in(state)
    case = case_on(node)
    assert case.state == RmaState.OPENED and node_state(node) == S.RMA
    assert history(node)[-1].transition == "send_to_rma"


def test_an_rma_case_with_move_node_false_leaves_the_node_alone(node_in, case_on):
    node = node_in(S.REPAIR)
    case_on(node, move_node=False)
    assert node_state(node) == S.REPAIR


def test_the_case_walks_opened_shipped_returned_closed_and_the_node_revalidates(node_in, case_on, as_operator):
    node = node_in(S.TRIAGE)
    case = case_on(node, to="returned")
    assert (case.state, case.vendor_case_number, case.replacement_serial, case.outcome) == (
        RmaState.RETURNED,
        "C-42",
        "1650999",
        "replaced",
    )
    assert case.shipped_at and case.returned_at
    closed = services.close_rma(case.pk, actor=as_operator, reason="new GPU installed")
    assert closed.state == RmaState.CLOSED and closed.closed_at
    assert node_state(node) == S.FIRMWARE_UPDATE
    assert [(e.from_state, e.to_state) for e in closed.events.all()] == [
        ("", "opened"),
        ("opened", "shipped"),
        ("shipped", "returned"),
        ("returned", "closed"),
    ]


def test_receive_needs_a_known_outcome_and_a_serial_when_replaced(node_in, case_on, as_operator):
    case = case_on(node_in(S.TRIAGE), to="shipped")
    with pytest.raises(ValidationError, match="outcome"):
        services.receive_rma(case.pk, replacement_serial="X", outcome="lost", actor=as_operator, reason="x")
    with pytest.raises(ValidationError) as err:
        services.receive_rma(case.pk, replacement_serial="", outcome="replaced", actor=as_operator, reason="x")
    assert "replacement_serial" in err.value.message_dict
    repaired = services.receive_rma(
        case.pk, replacement_serial="", outcome="no_fault_found", actor=as_operator, reason="vendor found nothing"
    )
    assert repaired.state == RmaState.RETURNED and repaired.outcome == "no_fault_found"


def test_it_refuses_rma_verbs_out_of_order(node_in, case_on, as_operator):
    case = case_on(node_in(S.TRIAGE))
    with pytest.raises(RepairConflict):
        services.receive_rma(case.pk, replacement_serial="X", outcome="replaced", actor=as_operator, reason="x")
    with pytest.raises(RepairConflict):
        services.close_rma(case.pk, actor=as_operator, reason="x")
    returned = case_on(node_in(S.TRIAGE), to="returned")
    with pytest.raises(RepairConflict):
        services.cancel_rma(returned.pk, actor=as_operator, reason="too late")


def test_cancelling_a_case_leaves_the_node_in_rma(node_in, case_on, as_operator):
    node = node_in(S.TRIAGE)
    case = services.cancel_rma(case_on(node, to="shipped").pk, actor=as_operator, reason="vendor refused the claim")
    assert case.state == RmaState.CANCELLED and node_state(node) == S.RMA


def test_a_node_in_rma_waits_for_its_other_case_and_its_open_ticket(node_in, case_on, ticket_on, as_operator):
    node = node_in(S.REPAIR)
    ticket = ticket_on(node, started=True)  # the technician's job outlives the return
    first, second = case_on(node, to="returned"), case_on(node, to="returned")
    services.close_rma(first.pk, actor=as_operator, reason="back")
    assert node_state(node) == S.RMA  # the second case is still open
    services.close_rma(second.pk, actor=as_operator, reason="back")
    assert node_state(node) == S.RMA  # the ticket is still open
    services.resolve_repair(ticket.pk, actor=as_operator, reason="both GPUs installed")
    assert node_state(node) == S.FIRMWARE_UPDATE


def test_a_viewer_may_not_open_or_move_a_case(node_in, case_on, viewer):
    node = node_in(S.TRIAGE)
    with pytest.raises(RepairForbidden):
        services.open_rma_case(
            node.pk, vendor="NVIDIA", part="GPU", failed_serial="1", actor=Actor(user=viewer), reason="x"
        )
    case = case_on(node)
    with pytest.raises(RepairForbidden):
        services.ship_rma(case.pk, actor=Actor(user=viewer), reason="x")
    assert RmaCase.objects.get().state == RmaState.OPENED


# --- History and webhooks -------------------------------------------------------------
def test_repair_history_is_append_only(node_in, ticket_on):
    event = ticket_on(node_in(S.TRIAGE)).events.get()
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        RepairEvent.objects.update(reason="rewritten")


def test_every_change_writes_a_delivery_for_each_subscribed_active_endpoint(node_in, ticket_on, case_on, as_operator):
    everything = WebhookEndpoint.objects.create(
        name="itsm", url="http://127.0.0.1:9/", secret="s", events=WebhookEvent.values
    )
    WebhookEndpoint.objects.create(
        name="chat", url="http://127.0.0.1:9/", secret="s", events=[WebhookEvent.TICKET_RESOLVED]
    )
    WebhookEndpoint.objects.create(
        name="off", url="http://127.0.0.1:9/", secret="s", events=WebhookEvent.values, active=False
    )
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node, started=True)
    services.resolve_repair(ticket.pk, actor=as_operator, reason="done")
    case_on(node_in(S.TRIAGE), to="returned")
    events = sorted(WebhookDelivery.objects.values_list("endpoint__name", "event"))
    assert events == [
        ("chat", "ticket.resolved"),
        ("itsm", "rma.opened"),
        ("itsm", "rma.updated"),
        ("itsm", "rma.updated"),
        ("itsm", "ticket.opened"),
        ("itsm", "ticket.resolved"),
        ("itsm", "ticket.updated"),
    ]
    payload = WebhookDelivery.objects.filter(endpoint=everything, event="ticket.resolved").get().payload
    assert payload["ticket"]["state"] == "resolved" and payload["change"] == {
        "verb": "resolve",
        "from": "in_progress",
        "to": "resolved",
        "actor": "operator",
        "reason": "done",
    }
    assert payload["ticket"]["url"].endswith(f"/repairs/{ticket.pk}/")


def test_a_refused_change_writes_no_delivery(node_in, ticket_on, as_operator):
    WebhookEndpoint.objects.create(name="itsm", url="http://127.0.0.1:9/", secret="s", events=WebhookEvent.values)
    ticket = ticket_on(node_in(S.TRIAGE))
    with pytest.raises(RepairConflict):
        services.resolve_repair(ticket.pk, actor=as_operator, reason="done")
    assert WebhookDelivery.objects.count() == 1  # the opening only
