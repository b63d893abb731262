"""The state machine, walked pair by pair: every (state, transition) is either
allowed, succeeds and writes history, or refused with a clear error and no change."""

from __future__ import annotations

import pytest
from django_fsm import TransitionNotAllowed

from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import Node, NodeEvent
from tests.factories import NodeFactory

S = NodeState

# The lifecycle as an operator would draw it: verb -> {source: target}.
EXPECTED: dict[str, dict[str, str]] = {
    "start_initialization": {S.ENROLLED: S.INITIALIZING},
    "mark_onboard": {S.INITIALIZING: S.ONBOARD},
    "start_validation": {S.ONBOARD: S.FIRMWARE_UPDATE},
    "revalidate": dict.fromkeys((S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA), S.FIRMWARE_UPDATE),
    "pass_firmware": {S.FIRMWARE_UPDATE: S.INVENTORY_CHECK},
    "pass_inventory_check": {S.INVENTORY_CHECK: S.BURN_IN},
    "pass_burn_in": {S.BURN_IN: S.FABRIC_CHECK},
    "pass_fabric_check": {S.FABRIC_CHECK: S.RELIABILITY_ASSESSMENT},
    "release_to_production": {S.RELIABILITY_ASSESSMENT: S.PRODUCTION},
    "fail_validation": dict.fromkeys(
        (S.INITIALIZING, S.FIRMWARE_UPDATE, S.INVENTORY_CHECK, S.BURN_IN, S.FABRIC_CHECK, S.RELIABILITY_ASSESSMENT),
        S.TRIAGE,
    ),
    "request_drain": {S.PRODUCTION: S.DRAIN_PENDING},
    "cancel_drain": {S.DRAIN_PENDING: S.PRODUCTION},
    "start_draining": {S.PRODUCTION: S.DRAINING, S.DRAIN_PENDING: S.DRAINING},
    "complete_drain": {S.DRAINING: S.TRIAGE},  # a system's drain (findings); an operator's: test_maintenance
    "start_maintenance": {S.PRODUCTION: S.DRAIN_PENDING},
    "end_maintenance": {S.MAINTENANCE: S.FIRMWARE_UPDATE},
    "cordon": {S.PRODUCTION: S.TRIAGE, S.DRAIN_PENDING: S.TRIAGE, S.DRAINING: S.TRIAGE},
    "start_remediation": {S.TRIAGE: S.REMEDIATING},
    "fail_remediation": {S.REMEDIATING: S.TRIAGE},
    "send_to_repair": {S.TRIAGE: S.REPAIR, S.REMEDIATING: S.REPAIR},
    "send_to_rma": {S.TRIAGE: S.RMA, S.REPAIR: S.RMA},
    "decommission": dict.fromkeys(
        (S.ENROLLED, S.INITIALIZING, S.ONBOARD, S.MAINTENANCE, S.TRIAGE, S.REPAIR, S.RMA), S.DECOMMISSIONED
    ),
}

PAIRS = [(state, verb) for state in NodeState.values for verb in sorted(services.VERBS)]
ACTOR = services.Actor.system("test")


def test_the_expected_table_names_every_verb():
    assert set(EXPECTED) == set(services.VERBS)


@pytest.mark.django_db
@pytest.mark.parametrize(("state", "verb"), PAIRS)
def test_each_state_and_verb_pair(state, verb, django_capture_on_commit_callbacks):
    node = NodeFactory(state=state)
    target = EXPECTED[verb].get(state)
    if target is not None:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            event = services.VERBS[verb](node.pk, actor=ACTOR, reason="table walk")
        node.refresh_from_db()
        assert node.state == target
        assert (event.source_state, event.target_state, event.transition) == (state, target, verb)
        assert event.kind == EventKind.TRANSITION and event.actor_name == "system:test"
        assert NodeEvent.objects.filter(node=node).count() == 1
        assert len(callbacks) == 1, "the follow-up task is queued once, on commit"
    else:
        before = Node.objects.values().get(pk=node.pk)
        with pytest.raises(TransitionNotAllowed, match=f"in state '{S(state).label}'"):
            services.VERBS[verb](node.pk, actor=ACTOR, reason="table walk")
        assert Node.objects.values().get(pk=node.pk) == before
        assert not NodeEvent.objects.exists()


@pytest.mark.django_db
def test_a_reason_is_required_and_nothing_changes_without_one():
    node = NodeFactory(state=S.PRODUCTION)
    with pytest.raises(services.ReasonRequired):
        services.request_drain(node.pk, actor=ACTOR, reason="   ")
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


@pytest.mark.django_db
def test_the_state_field_cannot_be_written_directly():
    node = NodeFactory(state=S.PRODUCTION)
    with pytest.raises(AttributeError):
        node.state = S.TRIAGE


@pytest.mark.django_db
def test_revalidation_is_marked_until_the_node_reaches_production():
    node = NodeFactory(state=S.REPAIR)
    services.revalidate(node.pk, actor=ACTOR, reason="technician replaced GPU 3")
    node.refresh_from_db()
    assert node.is_revalidation and node.state == S.FIRMWARE_UPDATE
    for verb in ("pass_firmware", "pass_inventory_check", "pass_burn_in", "pass_fabric_check", "release_to_production"):
        services.VERBS[verb](node.pk, actor=ACTOR, reason="stage passed")
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not node.is_revalidation


@pytest.mark.django_db
@pytest.mark.parametrize("start", NodeState.values)
def test_force_state_reaches_any_state_and_is_recorded_as_forced(start, fleet_admin):
    node = NodeFactory(state=start)
    event = services.force_state(node.pk, S.RMA, actor=services.Actor(user=fleet_admin), reason="vendor swap")
    node.refresh_from_db()
    assert node.state == S.RMA
    assert event.kind == EventKind.FORCED and event.source_state == start and event.actor == fleet_admin


@pytest.mark.django_db
def test_force_state_needs_its_permission(operator):
    node = NodeFactory(state=S.PRODUCTION)
    with pytest.raises(services.TransitionForbidden):
        services.force_state(node.pk, S.RMA, actor=services.Actor(user=operator), reason="try")
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


@pytest.mark.django_db
def test_users_without_the_operate_permission_cannot_run_transitions(viewer, customer):
    node = NodeFactory(state=S.PRODUCTION)
    for user in (viewer, customer):
        with pytest.raises(services.TransitionForbidden):
            services.request_drain(node.pk, actor=services.Actor(user=user), reason="try")
    assert not NodeEvent.objects.exists()


@pytest.mark.django_db
def test_history_survives_deletion_of_the_actor_and_cannot_be_rewritten(operator):
    node = NodeFactory(state=S.PRODUCTION)
    event = services.request_drain(node.pk, actor=services.Actor(user=operator), reason="ECC errors")
    operator.delete()
    event.refresh_from_db()
    assert event.actor is None and event.actor_name == "operator"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        NodeEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with pytest.raises(PermissionError):
        NodeEvent.objects.filter(pk=event.pk).delete()


@pytest.mark.django_db
def test_available_transitions_follow_state_and_permission(operator, viewer):
    node = NodeFactory(state=S.PRODUCTION)
    names = {t["name"] for t in services.available_transitions(node, operator)}
    assert names == {"request_drain", "start_draining", "cordon", "start_maintenance"}
    assert services.available_transitions(node, viewer) == []


@pytest.mark.django_db
def test_history_survives_deletion_of_the_node():
    node = NodeFactory(state=S.PRODUCTION, hostname="gone-01")
    event = services.cordon(node.pk, actor=ACTOR, reason="XID 79")
    Node.objects.filter(pk=node.pk).delete()
    event.refresh_from_db()
    assert event.node is None and event.hostname == "gone-01" and event.reason == "XID 79"


@pytest.mark.django_db
def test_a_transition_no_handler_answers_queues_nothing(monkeypatch, django_capture_on_commit_callbacks):
    """A transition without follow-up handlers costs no Celery task (and no Run row) after commit."""
    from nodes import followups

    monkeypatch.setitem(followups.FOLLOWUPS, "cordon", [])
    monkeypatch.setitem(followups.EVEN_IF_MOVED_ON, "cordon", [])
    node = NodeFactory(state=S.PRODUCTION)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.cordon(node.pk, actor=ACTOR, reason="no handler answers")
    node.refresh_from_db()
    assert node.state == S.TRIAGE and NodeEvent.objects.filter(node=node, transition="cordon").count() == 1
    assert callbacks == []
