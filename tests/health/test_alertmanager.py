"""The Alertmanager webhook receiver, on a realistic webhook (version 4)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from health.choices import AlertState, Severity
from health.models import Alert, Finding, UnroutedAlert
from tests.factories import NodeFactory

URL = "/api/ingest/alertmanager/"


def am_alert(status="firing", alertname="NodeFilesystemAlmostFull", fingerprint="7c1d5e2b3a4f6d8e", **labels):
    return {
        "status": status,
        "labels": {"alertname": alertname, "job": "node-exporter", **labels},
        "annotations": {"summary": "Filesystem /var has less than 5% space left."},
        "startsAt": "2026-03-02T11:58:30.123Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-03-02T12:30:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=node_filesystem_avail_bytes",
        "fingerprint": fingerprint,
    }


def webhook(*alerts, status="firing"):
    return {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "nodewarden",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


@pytest.fixture
def nodes(db):
    return NodeFactory(hostname="gpu-a01.dc1.example.com"), NodeFactory(hostname="gpu-b07.dc1.example.com")


def post(user, body):
    client = APIClient()
    client.force_authenticate(user)
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(URL, data, content_type="application/json")


def test_it_maps_alerts_to_nodes_by_label_and_keeps_the_unmatched(operator, nodes):
    a01, b07 = nodes
    body = webhook(
        am_alert(instance="gpu-a01.dc1.example.com:9100", severity="critical"),
        am_alert(alertname="GpuHot", fingerprint="aa11", Hostname="gpu-b07", severity="page"),
        am_alert(alertname="Mystery", fingerprint="bb22", instance="10.9.9.9:9100"),
    )

    response = post(operator, body)

    assert response.status_code == 200
    assert response.json() == {
        "accepted": 2,
        "resolved": 0,
        "unmatched": [{"fingerprint": "bb22", "alertname": "Mystery", "reason": "no node named '10.9.9.9'"}],
    }
    assert Alert.objects.get(node=a01).severity == Severity.DEGRADED
    hot = Alert.objects.get(node=b07)
    assert (hot.severity, hot.subject) == (Severity.CATASTROPHIC, "GpuHot|aa11")
    assert Finding.objects.get(node=a01).source == "alertmanager"
    unrouted = UnroutedAlert.objects.get()
    assert unrouted.labels["instance"] == "10.9.9.9:9100"


def test_a_repeated_webhook_refreshes_and_a_resolved_one_clears(operator, nodes):
    a01, _ = nodes
    post(operator, webhook(am_alert(hostname="gpu-a01")))
    post(operator, webhook(am_alert(hostname="gpu-a01")))
    response = post(operator, webhook(am_alert(status="resolved", hostname="gpu-a01"), status="resolved"))

    assert response.json()["resolved"] == 1
    alert = Alert.objects.get(node=a01)
    assert (alert.state, alert.occurrences) == (AlertState.RESOLVED, 2)
    assert Finding.objects.count() == 1


def test_nodewarden_severity_label_wins(operator, nodes):
    post(operator, webhook(am_alert(node="gpu-a01.dc1.example.com", severity="critical", nodewarden_severity="info")))

    assert Alert.objects.get().severity == Severity.INFO


def test_an_alert_without_any_host_label_is_unrouted_with_the_reason(operator, nodes):
    body = post(operator, webhook(am_alert())).json()

    assert body["unmatched"][0]["reason"].startswith("no host label")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "Malformed"),
        ({"version": "4"}, "alerts"),
        (webhook({"status": "burning", "labels": {}}), "$.alerts[0].status"),
        (webhook({"status": "firing", "labels": {"a": 1}}), "$.alerts[0].labels"),
    ],
)
def test_a_malformed_webhook_is_400_naming_the_field(operator, body, field):
    response = post(operator, body)

    assert response.status_code == 400 and field in response.json()["detail"]


@pytest.mark.parametrize("persona", ["viewer", "customer"])
def test_only_operators_may_post_alerts(request, persona, nodes):
    response = post(request.getfixturevalue(persona), webhook(am_alert(hostname="gpu-a01")))

    assert response.status_code == 403 and not Alert.objects.exists()


def test_a_nul_character_in_a_webhook_is_400_not_a_500(operator, nodes):
    response = post(operator, webhook({"status": "firing", "labels": {"alertname": "X\u0000", "hostname": "h"}}))

    assert response.status_code == 400 and "NUL" in response.json()["detail"]
