"""REST API: findings and alerts, scoped to the caller; operator verbs with permissions."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from health.choices import AlertState, Severity
from health.models import Alert
from health.services import raise_finding
from nodes.choices import EventKind
from nodes.models import NodeEvent
from tests.factories import NodeFactory


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def acme_alert(tenant):
    node = NodeFactory(tenant=tenant, hostname="acme-gpu-01")
    raise_finding(node.pk, rule="xid", severity=Severity.CATASTROPHIC, summary="XID 79", gpu_index=3, xid=79)
    return Alert.objects.get(node=node)


@pytest.fixture
def globex_alert(other_tenant):
    node = NodeFactory(tenant=other_tenant, hostname="globex-gpu-01")
    raise_finding(node.pk, rule="gpu_temperature", severity=Severity.DEGRADED, summary="hot", gpu_index=0)
    return Alert.objects.get(node=node)


def test_a_customer_sees_only_its_tenants_alerts_and_findings(customer, acme_alert, globex_alert):
    api = client_for(customer)

    assert [a["id"] for a in api.get("/api/alerts/").json()["results"]] == [acme_alert.pk]
    assert [f["node"] for f in api.get("/api/findings/").json()["results"]] == [acme_alert.node_id]
    assert api.get(f"/api/alerts/{globex_alert.pk}/").status_code == 404


def test_a_customer_does_not_see_the_fleet_auditors_findings(customer, operator, acme_alert):
    """Seen in the demo: customers read "Audit: remediation #212 draining" among their alerts."""
    raise_finding(
        acme_alert.node_id,
        rule="audit.live_remediation",
        severity=Severity.WARNING,
        summary="Audit: remediation #212 draining with its node in triage",
    )
    customer_view = client_for(customer).get("/api/alerts/").json()["results"]
    operator_view = client_for(operator).get("/api/alerts/").json()["results"]
    assert [a["rule"] for a in customer_view] == ["xid"]
    assert {a["rule"] for a in operator_view} == {"xid", "audit.live_remediation"}
    assert "audit." not in str(client_for(customer).get("/api/findings/").json())


def test_filters_select_findings_by_severity_rule_and_gpu(operator, acme_alert, globex_alert):
    api = client_for(operator)

    rows = api.get("/api/findings/", {"severity": "catastrophic", "gpu": 3, "rule": "xid"}).json()["results"]
    assert [r["xid"] for r in rows] == [79]
    assert api.get("/api/alerts/", {"severity": "bogus"}).status_code == 400


def test_an_operator_acknowledges_silences_and_resolves_with_history(operator, acme_alert):
    api = client_for(operator)
    base = f"/api/alerts/{acme_alert.pk}"

    ack = api.post(f"{base}/acknowledge/", {"note": "on it"}, format="json")
    silenced = api.post(f"{base}/silence/", {"minutes": 60, "reason": "known, RMA booked"}, format="json")
    hidden = api.get("/api/alerts/").json()["results"]
    shown = api.get("/api/alerts/", {"show_silenced": "true"}).json()["results"]
    unsilenced = api.post(f"{base}/unsilence/", {"reason": "RMA cancelled"}, format="json")
    resolved = api.post(f"{base}/resolve/", {"reason": "GPU replaced"}, format="json")

    assert ack.json()["acknowledged_by"] == "operator" and ack.json()["acknowledged_note"] == "on it"
    assert silenced.json()["silenced"] is True
    assert hidden == [] and [a["id"] for a in shown] == [acme_alert.pk]
    assert unsilenced.json()["silenced"] is False
    assert resolved.json()["state"] == AlertState.RESOLVED and resolved.json()["resolved_by"] == "operator"
    notes = NodeEvent.objects.filter(node=acme_alert.node, kind=EventKind.NOTE).values_list("actor_name", flat=True)
    assert list(notes) == ["operator"] * 4


@pytest.mark.parametrize("persona", ["viewer", "customer"])
def test_viewers_and_customers_may_not_act_on_alerts(request, persona, acme_alert):
    api = client_for(request.getfixturevalue(persona))

    response = api.post(f"/api/alerts/{acme_alert.pk}/resolve/", {"reason": "x"}, format="json")

    assert response.status_code == 403
    assert Alert.objects.get(pk=acme_alert.pk).state == AlertState.FIRING


def test_a_customer_acting_on_another_tenants_alert_gets_404(customer, globex_alert):
    response = client_for(customer).post(f"/api/alerts/{globex_alert.pk}/resolve/", {"reason": "x"}, format="json")

    assert response.status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("resolve", {"reason": "  "}, "reason"),
        ("acknowledge", {}, "note"),
        ("silence", {"reason": "x"}, "until"),
        ("silence", {"reason": "x", "until": "2000-01-01T00:00:00Z"}, "until"),
        ("silence", {"reason": "x", "minutes": 0}, "minutes"),
    ],
)
def test_bad_verb_bodies_are_400_naming_the_field(operator, acme_alert, path, body, field):
    response = client_for(operator).post(f"/api/alerts/{acme_alert.pk}/{path}/", body, format="json")

    assert response.status_code == 400 and field in response.json()["fields"]


def test_acting_on_a_resolved_alert_is_a_clear_400(operator, acme_alert):
    api = client_for(operator)
    api.post(f"/api/alerts/{acme_alert.pk}/resolve/", {"reason": "done"}, format="json")

    response = api.post(f"/api/alerts/{acme_alert.pk}/acknowledge/", {"note": "late"}, format="json")

    assert response.status_code == 400 and "already resolved" in response.json()["fields"]["state"][0]


def test_rules_and_the_xid_catalog_are_readable(viewer):
    api = client_for(viewer)

    assert api.get("/api/xid-catalog/79/").json()["recommended_action"] == "reboot"
    keys = {r["key"] for r in api.get("/api/health-rules/", {"limit": 100}).json()["results"]}
    assert {"gpu_temperature", "xid", "heartbeat_missing", "ib_link_flaps"} <= keys


def test_the_alert_list_costs_the_same_for_1_and_10_alerts(operator, tenant, django_assert_max_num_queries):
    api = client_for(operator)
    for i in range(10):
        node = NodeFactory(tenant=tenant)
        raise_finding(node.pk, rule="xid", severity=Severity.WARNING, summary=f"x{i}")
        if i == 0:
            api.get("/api/alerts/")  # warm-up
    with django_assert_max_num_queries(3):
        assert len(api.get("/api/alerts/").json()["results"]) == 10
