"""A customer reports a node they believe is bad (portal form and POST /api/nodes/{id}/report-bad/):
a customer_report finding with the customer as its source, through the same policies (degraded:
drained when the job ends), answered on the node's history; one open report per node."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from health.choices import AlertState
from health.customer_reports import RULE, NotYourNode, report_bad_node
from health.models import Alert, Finding
from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from tests.factories import NodeFactory, UserFactory
from tests.validation.conftest import eager  # noqa: F401

ACTOR = services.Actor.system("test")


@pytest.fixture
def node(tenant):
    return NodeFactory(tenant=tenant, state=NodeState.PRODUCTION)


def client_as(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def report(user, node, **body):
    return client_as(user).post(f"/api/nodes/{node.pk}/report-bad/", body, format="json")


def test_a_customers_report_becomes_a_finding_with_the_customer_as_its_source(customer, node):
    answer = report(customer, node, reason="NCCL all-reduce hangs on this node", job_id="train-4711")
    assert answer.status_code == 201, answer.content
    finding = Finding.objects.get(pk=answer.json()["finding"])
    assert (finding.rule, finding.severity, finding.source) == (RULE, "degraded", "customer")
    assert finding.actor_name == "acme-user"
    assert finding.evidence["job_id"] == "train-4711" and finding.evidence["tenant"] == "Acme AI"
    row = NodeEvent.objects.get(pk=answer.json()["event"])
    assert row.kind == EventKind.FINDING and row.actor_name == "acme-user"
    assert "acme-user (Acme AI) (job train-4711): NCCL all-reduce hangs on this node" in row.reason


def test_a_second_report_while_one_is_open_is_a_note_not_a_finding(customer, node, tenant):
    assert report(customer, node, reason="hangs").status_code == 201
    colleague = UserFactory(username="acme-2", tenant=tenant)
    again = report(colleague, node, reason="still hangs", job_id="j2")
    assert again.status_code == 200 and again.json()["duplicate"] is True and again.json()["finding"] is None
    assert Finding.objects.filter(node=node, rule=RULE).count() == 1
    note = NodeEvent.objects.get(pk=again.json()["event"])
    assert (
        note.kind == EventKind.NOTE and "acme-2 (Acme AI) reports the node again (job j2): still hangs" in note.reason
    )


def test_the_report_goes_through_the_policy_and_is_answered_when_the_node_returns(customer, node, eager):  # noqa: F811
    # The cluster's blast-radius limit (10 %) lets one node of eleven out.
    NodeFactory.create_batch(10, cluster=node.cluster, site=node.site, state=NodeState.PRODUCTION)
    with eager():
        assert report(customer, node, reason="ECC errors in my job log").status_code == 201
    node.refresh_from_db()
    assert node.state != NodeState.PRODUCTION  # drained (nothing ran on it) and on the remediation road
    assert NodeEvent.objects.filter(node=node, transition="request_drain").exists()

    with eager():
        services.force_state(node.pk, NodeState.PRODUCTION, actor=ACTOR, reason="re-validated: all checks pass")
    alert = Alert.objects.get(node=node, rule=RULE)
    assert alert.state == AlertState.RESOLVED
    answered = NodeEvent.objects.filter(node=node, kind=EventKind.NOTE, details__alert_id=alert.pk).get()
    assert "back in production" in answered.reason
    # Answered: a new report opens a new finding.
    assert report(customer, node, reason="it is back and hangs again").status_code == 201


def test_a_staff_viewer_may_see_the_node_but_not_report_it(viewer, node):
    assert report(viewer, node, reason="x").status_code == 403
    assert not Finding.objects.filter(node=node).exists()


def test_an_operator_may_report_on_a_customers_behalf(operator, node):
    assert report(operator, node, reason="customer called the NOC").status_code == 201


def test_another_tenants_user_gets_404(other_tenant, node):
    stranger = UserFactory(username="globex-user", tenant=other_tenant)
    assert report(stranger, node, reason="x").status_code == 404
    assert report(stranger, node).status_code == 404  # no leak through the body's validation


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 1001},
        {"reason": "ok", "job_id": "j" * 101},
        {"reason": ["a", "list"]},
        {"reason": "nul \x00 byte"},
    ],
)
def test_bad_input_is_a_400(customer, node, body):
    answer = report(customer, node, **body)
    assert answer.status_code == 400, answer.content
    assert not Finding.objects.filter(node=node).exists()


def test_anonymous_is_refused(node):
    assert APIClient().post(f"/api/nodes/{node.pk}/report-bad/", {"reason": "x"}).status_code in (401, 403)


def test_the_service_refuses_a_user_of_another_tenant(other_tenant, node):
    with pytest.raises(NotYourNode):
        report_bad_node(node.pk, user=UserFactory(username="g2", tenant=other_tenant), reason="x")


# --- the portal ------------------------------------------------------------------------------------


def test_the_node_page_offers_the_form_to_the_tenant_and_not_to_a_viewer(client, customer, viewer, node):
    client.force_login(customer)
    assert b'id="report-bad-form"' in client.get(f"/nodes/{node.pk}/alerts/").content
    client.force_login(viewer)
    assert b'id="report-bad-form"' not in client.get(f"/nodes/{node.pk}/alerts/").content


def test_the_portal_form_reports_and_redirects_to_the_node(client, customer, viewer, node):
    client.force_login(customer)
    answer = client.post(f"/nodes/{node.pk}/report-bad/", {"reason": "GPU 3 slow", "job_id": ""})
    assert answer.status_code == 302 and answer.url == f"/nodes/{node.pk}/"
    assert Finding.objects.filter(node=node, rule=RULE, source="customer").count() == 1
    client.force_login(viewer)
    assert client.post(f"/nodes/{node.pk}/report-bad/", {"reason": "x"}).status_code == 403
    client.force_login(customer)
    blank = client.post(f"/nodes/{node.pk}/report-bad/", {"reason": " "}, follow=True)
    assert blank.status_code == 200 and Finding.objects.filter(node=node).count() == 1
