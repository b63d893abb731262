"""Alerts pushed to a real Prometheus Alertmanager (0.25, Debian's package; the ``alertmanager``
fixture starts a fresh one per test): they appear with their labels, resolve, survive its
restart through the resend task, and a dead Alertmanager costs an alert nothing."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from rest_framework.test import APIClient

from health import alertmanager_push
from health.alerts import acknowledge, silence, unsilence
from health.choices import AlertState, RecommendedAction, Severity
from health.models import Alert, AlertmanagerTally, Finding, UnroutedAlert
from health.services import clear_condition, raise_finding
from health.tasks import resend_alerts_to_alertmanager
from nodes.services import Actor
from reports.metrics import registry
from tests.factories import NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db
OPERATOR = Actor.system("test-operator")


def fire_xid(node, capture, *, gpu_index=3, severity=Severity.CATASTROPHIC) -> Alert:
    """A catastrophic XID 79 on the node, committed (its follow-ups run, the push among them)."""
    with capture(execute=True):
        finding = raise_finding(
            node.pk,
            rule="xid",
            severity=severity,
            gpu_index=gpu_index,
            xid=79,
            source="agent",
            summary="XID 79: GPU has fallen off the bus",
            recommended_action=RecommendedAction.POWER_CYCLE,
        )
    return Alert.objects.get(pk=finding.alert_id)


@pytest.fixture
def node(db):
    return NodeFactory(hostname="gpu-a01.dc1.example.com", tenant=TenantFactory(slug="acme"))


def test_a_catastrophic_finding_appears_in_alertmanager_with_its_labels_and_annotations(
    alertmanager, node, settings, django_capture_on_commit_callbacks
):
    alert = fire_xid(node, django_capture_on_commit_callbacks)

    (seen,) = alertmanager.alerts(node=node.hostname)
    assert seen["labels"] == {
        "alertname": "NodewardenAlert",
        "node": "gpu-a01.dc1.example.com",
        "cluster": node.cluster.name,
        "site": node.site.slug,
        "tenant": "acme",
        "rule": "xid",
        "severity": "catastrophic",
        "component": "gpu3",
        "acknowledged": "false",
        "nodewarden_alert_id": str(alert.pk),
    }
    page = f"{settings.PORTAL_URL.rstrip('/')}/nodes/{node.pk}/"
    assert seen["annotations"] == {
        "summary": "XID 79: GPU has fallen off the bus",
        "node_url": page,
        "recommended_action": "Power cycle (BMC)",
    }
    assert seen["generatorURL"] == page
    assert seen["status"]["state"] == "active"
    assert AlertmanagerTally.objects.get(receiver=alertmanager.url).pushes == 1


def test_each_alert_carries_its_own_nodes_tenant(alertmanager, node, django_capture_on_commit_callbacks):
    other = NodeFactory(tenant=TenantFactory(slug="globex"))
    unassigned = NodeFactory(tenant=None)
    for each in (node, other, unassigned):
        fire_xid(each, django_capture_on_commit_callbacks)

    assert [a["labels"]["node"] for a in alertmanager.alerts(tenant="acme")] == [node.hostname]
    assert [a["labels"]["node"] for a in alertmanager.alerts(tenant="globex")] == [other.hostname]
    (spare,) = alertmanager.alerts(node=unassigned.hostname)
    assert "tenant" not in spare["labels"]  # no tenant: no label, as Prometheus leaves out empty ones


def test_resolving_the_alert_resolves_it_in_alertmanager(alertmanager, node, django_capture_on_commit_callbacks):
    fire_xid(node, django_capture_on_commit_callbacks)
    assert len(alertmanager.alerts(node=node.hostname)) == 1

    with django_capture_on_commit_callbacks(execute=True):
        clear_condition(node.pk, rule="xid", gpu_index=3, reason="GPU replaced")

    # Alertmanager lists alerts whose endsAt has not passed; a resolved one is gone from the list.
    assert alertmanager.alerts(node=node.hostname) == []


def test_a_restarted_alertmanager_learns_the_firing_alerts_from_the_resend(
    alertmanager, node, django_capture_on_commit_callbacks
):
    firing = fire_xid(node, django_capture_on_commit_callbacks)
    fire_xid(node, django_capture_on_commit_callbacks, gpu_index=5)
    with django_capture_on_commit_callbacks(execute=True):
        clear_condition(node.pk, rule="xid", gpu_index=5, reason="quiet")

    alertmanager.stop()
    alertmanager.start()  # a fresh storage folder: it remembers nothing
    assert alertmanager.alerts() == []

    assert resend_alerts_to_alertmanager() == {"alerts": 2, "failed_receivers": 0}

    (seen,) = alertmanager.alerts()  # the resolved one is sent again, as resolved
    assert seen["labels"]["nodewarden_alert_id"] == str(firing.pk)
    assert seen["status"]["state"] == "active"


def test_a_dead_alertmanager_breaks_no_transaction_is_counted_and_the_resend_heals_it(
    alertmanager, node, settings, django_capture_on_commit_callbacks
):
    live = alertmanager.url
    alertmanager.stop()  # its port is closed now
    alert = fire_xid(node, django_capture_on_commit_callbacks)

    assert Alert.objects.get(pk=alert.pk).state == AlertState.FIRING
    assert Finding.objects.filter(alert=alert).count() == 1
    tally = AlertmanagerTally.objects.get(receiver=live)
    assert (tally.pushes, tally.failures) == (0, 1)
    assert tally.last_error
    text = generate_latest(registry()).decode()
    assert f'nodewarden_alertmanager_push_failures_total{{receiver="{live}"}} 1.0' in text

    alertmanager.start()
    resend_alerts_to_alertmanager()
    assert len(alertmanager.alerts(node=node.hostname)) == 1
    assert f'nodewarden_alertmanager_pushes_total{{receiver="{live}"}} 1.0' in generate_latest(registry()).decode()


def test_an_acknowledgement_keeps_it_firing_with_a_label_and_replaces_the_unacknowledged_one(
    alertmanager, node, django_capture_on_commit_callbacks
):
    alert = fire_xid(node, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        acknowledge(alert.pk, actor=OPERATOR, note="swapping the GPU")

    (seen,) = alertmanager.alerts(node=node.hostname)
    assert seen["labels"]["acknowledged"] == "true"
    assert seen["annotations"]["acknowledged_note"] == "swapping the GPU"
    assert seen["status"]["state"] == "active"


def test_an_escalation_replaces_the_lower_severity_in_alertmanager(
    alertmanager, node, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        raise_finding(node.pk, rule="gpu_temperature", severity=Severity.WARNING, gpu_index=0, summary="GPU 0 at 88 C")
    with django_capture_on_commit_callbacks(execute=True):
        raise_finding(node.pk, rule="gpu_temperature", severity=Severity.DEGRADED, gpu_index=0, summary="GPU 0 at 93 C")

    (seen,) = alertmanager.alerts(node=node.hostname)
    assert seen["labels"]["severity"] == "degraded"


def test_a_nodewarden_silence_resolves_it_in_alertmanager_until_lifted(
    alertmanager, node, django_capture_on_commit_callbacks
):
    alert = fire_xid(node, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        silence(alert.pk, actor=OPERATOR, reason="known, vendor on site", minutes=60)
    assert alertmanager.alerts(node=node.hostname) == []
    resend_alerts_to_alertmanager()
    assert alertmanager.alerts(node=node.hostname) == []  # the resend keeps it quiet

    with django_capture_on_commit_callbacks(execute=True):
        unsilence(alert.pk, actor=OPERATOR)
    assert len(alertmanager.alerts(node=node.hostname)) == 1


def test_with_no_alertmanager_configured_nothing_is_pushed(settings, node, django_capture_on_commit_callbacks):
    settings.NODEWARDEN_ALERTMANAGER_URLS = []
    fire_xid(node, django_capture_on_commit_callbacks)
    assert resend_alerts_to_alertmanager() == {"alerts": 0, "failed_receivers": 0}
    assert not AlertmanagerTally.objects.exists()


def test_credentials_in_the_url_become_basic_auth_and_stay_off_metrics(settings):
    settings.NODEWARDEN_ALERTMANAGER_URLS = ["https://nw:s3cret@am.example:9093/am/"]
    (receiver,) = alertmanager_push.receivers()
    assert receiver.url == "https://am.example:9093/am/api/v2/alerts"
    assert receiver.name == "https://am.example:9093/am"
    assert receiver.authorization == "Basic bnc6czNjcmV0"


def test_the_webhook_receiver_skips_alerts_nodewarden_pushed_itself(operator, node):
    """A route that sends Nodewarden's own alerts back to its webhook must not loop."""
    client = APIClient()
    client.force_authenticate(operator)
    own = {
        "status": "firing",
        "labels": {"alertname": "NodewardenAlert", "node": node.hostname, "nodewarden_alert_id": "7"},
        "annotations": {"summary": "XID 79"},
        "startsAt": "2026-03-02T11:58:30Z",
        "endsAt": "2026-03-02T12:02:30Z",
        "fingerprint": "ab12",
    }
    body = {"version": "4", "status": "firing", "receiver": "nodewarden", "alerts": [own]}
    response = client.post("/api/ingest/alertmanager/", json.dumps(body), content_type="application/json")

    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 0, "resolved": 0, "unmatched": []}
    assert not Finding.objects.exists()
    assert not UnroutedAlert.objects.exists()
