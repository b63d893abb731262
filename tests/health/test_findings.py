"""Findings and alerts: dedupe, escalation, shadow mode, profile overrides, windows, query cost."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from health.choices import AlertState, RecommendedAction, Severity
from health.evaluation import evaluate_reports
from health.models import Alert, Finding, HealthRule
from health.services import clear_condition, raise_finding
from nodes.choices import EventKind
from nodes.models import NodeEvent
from tests.factories import HardwareProfileFactory, NodeFactory

from .conftest import T0, context, gpu, minutes, report
from .test_fatal_xid import xid_event


def test_the_same_condition_twice_is_one_finding_one_alert_two_occurrences(node):
    for _ in range(2):
        raise_finding(node.pk, rule="gpu_temperature", severity=Severity.DEGRADED, summary="hot", gpu_index=1)

    assert Finding.objects.count() == 1
    alert = Alert.objects.get()
    assert alert.occurrences == 2 and alert.dedupe_key == "gpu_temperature|1|"
    assert NodeEvent.objects.filter(node=node, kind=EventKind.FINDING).count() == 1


def test_a_worse_severity_on_an_open_alert_escalates_it_with_a_new_finding(node):
    raise_finding(node.pk, rule="alertmanager", severity=Severity.WARNING, summary="warm", subject="a|1")
    finding = raise_finding(
        node.pk, rule="alertmanager", severity=Severity.CATASTROPHIC, summary="on fire", subject="a|1"
    )

    alert = Alert.objects.get()
    assert (alert.severity, alert.summary, alert.last_finding) == (Severity.CATASTROPHIC, "on fire", finding)
    assert Finding.objects.count() == 2


def test_a_cleared_condition_that_fires_again_opens_a_new_alert(node):
    raise_finding(node.pk, rule="nvlink_down", severity=Severity.DEGRADED, summary="links", gpu_index=0)
    resolved = clear_condition(node.pk, rule="nvlink_down", gpu_index=0, reason="links back")
    raise_finding(node.pk, rule="nvlink_down", severity=Severity.DEGRADED, summary="links", gpu_index=0)

    assert resolved.state == AlertState.RESOLVED and resolved.resolved_reason == "links back"
    assert Alert.objects.filter(state=AlertState.FIRING).count() == 1
    assert Alert.objects.count() == 2


def test_clear_condition_without_an_open_alert_does_nothing(node):
    assert clear_condition(node.pk, rule="nvlink_down", gpu_index=0) is None


def test_findings_are_append_only(node):
    finding = raise_finding(node.pk, rule="xid", severity=Severity.CATASTROPHIC, summary="XID 79", gpu_index=3)
    finding.summary = "rewritten"
    with pytest.raises(PermissionError):
        finding.save()
    with pytest.raises(PermissionError):
        Finding.objects.all().delete()


def test_it_refuses_an_unknown_severity(node):
    with pytest.raises(ValueError):
        raise_finding(node.pk, rule="x", severity="apocalyptic", summary="?")


def test_a_shadow_rule_records_a_finding_but_no_alert_and_no_event(node):
    HealthRule.objects.filter(key="gpu_temperature", hardware_profile=None).update(shadow=True)

    for i in range(3):
        evaluate_reports(
            [
                context(
                    node,
                    report(T0 + minutes(i), gpus=[gpu(i, temperature_c=95.0) if i == 0 else gpu(i) for i in range(8)]),
                )
            ]
        )

    [finding] = Finding.objects.filter(rule="gpu_temperature")
    assert finding.shadow
    assert not Alert.objects.exists()
    assert not NodeEvent.objects.filter(kind=EventKind.FINDING).exists()


def test_a_profile_row_overrides_the_default_for_nodes_of_that_profile(node):
    cool = HardwareProfileFactory(name="A100 PCIe air-cooled")
    other = NodeFactory(hardware_profile=cool)
    default = HealthRule.objects.get(key="gpu_temperature", hardware_profile=None)
    HealthRule.objects.create(
        key="gpu_temperature",
        hardware_profile=cool,
        severity=Severity.WARNING,
        threshold=80,
        clear_threshold=5,
        params={"use_gpu_limit": False},
        recommended_action=RecommendedAction.INSPECT,
    )
    hot = [gpu(0, temperature_c=82.0)] + [gpu(i) for i in range(1, 8)]

    evaluate_reports([context(node, report(T0, gpus=hot)), context(other, report(T0, gpus=hot))])

    assert default.threshold == 87
    [alert] = Alert.objects.filter(rule="gpu_temperature")
    assert (alert.node, alert.severity) == (other, Severity.WARNING)


def test_a_disabled_rule_does_not_run(node):
    HealthRule.objects.filter(key="gpu_missing").update(enabled=False)

    evaluate_reports([context(node, report(T0, gpus=[gpu(0)]))])

    assert not Alert.objects.filter(rule="gpu_missing").exists()


def test_five_catastrophic_xids_in_a_day_on_one_gpu_mean_rma(node):
    for i in range(4):
        evaluate_reports(
            [context(node, report(T0 + minutes(i * 60), xid_events=[xid_event(48, at=T0 + minutes(i * 60))]))]
        )
    assert not Alert.objects.filter(rule="xid_repeated").exists()

    evaluate_reports([context(node, report(T0 + minutes(300), xid_events=[xid_event(48, at=T0 + minutes(300))]))])

    [alert] = Alert.objects.filter(rule="xid_repeated")
    assert (alert.gpu_index, alert.severity, alert.recommended_action) == (0, Severity.DEGRADED, RecommendedAction.RMA)


def test_xid_79_twice_in_a_week_means_rma(node):
    evaluate_reports([context(node, report(T0, xid_events=[xid_event(79, at=T0)]))])
    later = T0 + minutes(3 * 24 * 60)
    evaluate_reports([context(node, report(later, xid_events=[xid_event(79, at=later)]))])

    [alert] = Alert.objects.filter(rule="xid_repeated", subject="xid:79")
    assert alert.recommended_action == RecommendedAction.RMA


def test_repeated_application_xids_are_not_rma(node):
    events = [xid_event(13, at=T0 + minutes(i)) for i in range(10)]
    evaluate_reports([context(node, report(T0 + minutes(11), xid_events=events))])

    assert not Alert.objects.filter(rule="xid_repeated").exists()
    assert Alert.objects.get(rule="xid").occurrences == 10


@pytest.mark.parametrize("batch", [1, 20])
def test_healthy_reports_cost_a_constant_number_of_queries(node, batch, django_assert_max_num_queries):
    nodes = [node] + [NodeFactory(hardware_profile=node.hardware_profile) for _ in range(batch - 1)]
    contexts = [context(n, report(T0)) for n in nodes]
    evaluate_reports([context(node, report(T0))])  # warm the rule and catalog caches

    with CaptureQueriesContext(connection) as queries:
        evaluate_reports(contexts)

    assert len(queries) == 1, [q["sql"] for q in queries]  # the batch's open alerts, nothing else


def test_the_database_allows_one_firing_alert_per_condition_but_many_resolved(node):
    from django.db import IntegrityError, transaction

    fields = {
        "node": node,
        "rule": "nvlink_down",
        "dedupe_key": "nvlink_down|0|",
        "severity": Severity.DEGRADED,
        "summary": "s",
    }
    Alert.objects.create(state=AlertState.RESOLVED, **fields)
    Alert.objects.create(state=AlertState.RESOLVED, **fields)
    Alert.objects.create(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(**fields)
