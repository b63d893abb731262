"""health.tasks.check_heartbeats: silent nodes, nodes that left service, quiet XID alerts."""

from __future__ import annotations

from datetime import timedelta

import time_machine

from health.choices import AlertState, RecommendedAction, Severity
from health.evaluation import evaluate_reports
from health.models import Alert, Finding
from health.tasks import check_heartbeats
from nodes.choices import NodeState
from telemetry.models import NodeHealth
from tests.factories import NodeFactory

from .conftest import T0, context, report
from .test_fatal_xid import xid_event


def reported(node, at):
    NodeHealth.objects.update_or_create(node=node, defaults={"last_report_at": at, "last_received_at": at})


def production_node(node):
    NodeFactory._meta.model.objects.filter(pk=node.pk).update(
        state=NodeState.PRODUCTION, state_changed_at=T0 - timedelta(days=1)
    )
    node.refresh_from_db()
    return node


def test_a_node_silent_past_the_grace_gets_a_catastrophic_heartbeat_alert_once(node):
    production_node(node)
    reported(node, T0)

    with time_machine.travel(T0 + timedelta(seconds=170), tick=False):
        assert check_heartbeats()["raised"] == 0
    with time_machine.travel(T0 + timedelta(seconds=181), tick=False):
        assert check_heartbeats()["raised"] == 1
    with time_machine.travel(T0 + timedelta(seconds=241), tick=False):
        assert check_heartbeats() == {"raised": 0, "refreshed": 1, "left_service": 0, "quiet_resolved": 0}

    [alert] = Alert.objects.filter(node=node, rule="heartbeat_missing")
    assert (alert.severity, alert.recommended_action, alert.occurrences) == (
        Severity.CATASTROPHIC,
        RecommendedAction.REBOOT,
        2,
    )
    assert Finding.objects.filter(rule="heartbeat_missing").count() == 1


def test_a_node_back_from_rma_gets_its_grace_from_when_it_came_back(node):
    """Its last report is weeks old (the node was at the vendor): it owes one only from its return."""
    reported(node, T0 - timedelta(days=21))
    NodeFactory._meta.model.objects.filter(pk=node.pk).update(state=NodeState.FIRMWARE_UPDATE, state_changed_at=T0)

    with time_machine.travel(T0 + timedelta(seconds=170), tick=False):
        assert check_heartbeats()["raised"] == 0
    with time_machine.travel(T0 + timedelta(seconds=181), tick=False):
        assert check_heartbeats()["raised"] == 1
    finding = Finding.objects.get(node=node, rule="heartbeat_missing")
    assert finding.evidence["silent_seconds"] == 181  # since it came back, not three weeks


def test_nodes_expected_to_be_dark_raise_nothing(node):
    NodeFactory._meta.model.objects.filter(pk=node.pk).update(state=NodeState.REPAIR)
    reported(node, T0)

    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert check_heartbeats()["raised"] == 0


def test_the_next_report_clears_the_heartbeat_alert(node):
    production_node(node)
    reported(node, T0)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        check_heartbeats()

    evaluate_reports([context(node, report(T0 + timedelta(minutes=6)))])

    alert = Alert.objects.get(node=node, rule="heartbeat_missing")
    assert alert.state == AlertState.RESOLVED and alert.resolved_reason == "a report arrived"


def test_a_node_sent_to_repair_loses_its_heartbeat_alert(node):
    production_node(node)
    reported(node, T0)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        check_heartbeats()
    NodeFactory._meta.model.objects.filter(pk=node.pk).update(state=NodeState.REPAIR)

    with time_machine.travel(T0 + timedelta(minutes=6), tick=False):
        assert check_heartbeats()["left_service"] == 1


def test_xid_alerts_resolve_after_six_quiet_hours(node):
    evaluate_reports([context(node, report(T0, xid_events=[xid_event(13, at=T0)]))])

    with time_machine.travel(T0 + timedelta(hours=5), tick=False):
        assert check_heartbeats()["quiet_resolved"] == 0
    with time_machine.travel(T0 + timedelta(hours=6, seconds=1), tick=False):
        assert check_heartbeats()["quiet_resolved"] == 1
    assert Alert.objects.get(rule="xid").state == AlertState.RESOLVED
