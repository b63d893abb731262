"""The remediation API: remediations scoped like nodes (another tenant's answer 404), the
operator's approve, skip-rung and stop with their answers (200, 400, 403, 404, 409), holds and
circuit breakers for staff, and list queries bounded whatever the number of rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from nodes.choices import NodeState
from remediation.choices import Rung, Status
from remediation.models import CircuitBreaker, Hold
from tests.factories import ClusterFactory, NodeFactory

from .test_pages import remediation_on

pytestmark = pytest.mark.django_db
S = NodeState


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def post(user, name, pk, reason="checked the node"):
    return api(user).post(reverse(f"api:{name}", args=[pk]), {"reason": reason}, format="json")


def test_the_list_filters_by_status_rung_node_and_cluster(operator):
    east = ClusterFactory(name="east")
    running = remediation_on(NodeFactory(cluster=east, state=S.REMEDIATING))
    queued = remediation_on(NodeFactory(state=S.PRODUCTION), status=Status.QUEUED, rung=Rung.REBOOT)
    remediation_on(NodeFactory(state=S.PRODUCTION), status=Status.SUCCEEDED, finished=timezone.now())
    url = reverse("api:remediation-list")

    def ids(query):
        return [r["id"] for r in api(operator).get(url, query).json()["results"]]

    assert api(operator).get(url).json()["count"] == 3
    assert ids({"status": "queued"}) == [queued.pk]
    assert ids({"open": "true", "rung": "power_cycle"}) == [running.pk]
    assert ids({"node": queued.node_id}) == [queued.pk]
    assert ids({"cluster": "east"}) == [running.pk]
    assert api(operator).get(url, {"status": "sleeping"}).status_code == 400


def test_one_remediation_comes_with_its_steps_and_decisions(operator):
    rem = remediation_on(NodeFactory(hostname="gpu-api-01", state=S.REMEDIATING))
    body = api(operator).get(reverse("api:remediation-detail", args=[rem.pk])).json()
    assert (body["hostname"], body["status"], body["rung"]) == ("gpu-api-01", "running", "power_cycle")
    assert body["finding_summary"] == "XID 79: GPU has fallen off the bus"
    assert [(s["rung"], s["status"]) for s in body["steps"]] == [("gpu_reset", "failed"), ("power_cycle", "running")]
    first, second = body["decisions"]
    assert first["who"] == "system:remediation" and first["finding"] == rem.finding_id
    assert "climbing to bmc power cycle" in second["what"] and "finding" not in second


def test_customers_see_their_own_nodes_remediations_only(customer, tenant, other_tenant):
    mine = remediation_on(NodeFactory(state=S.TRIAGE, tenant=tenant))
    theirs = remediation_on(NodeFactory(state=S.TRIAGE, tenant=other_tenant))
    client = api(customer)
    assert [r["id"] for r in client.get(reverse("api:remediation-list")).json()["results"]] == [mine.pk]
    assert client.get(reverse("api:remediation-detail", args=[theirs.pk])).status_code == 404
    assert client.get(reverse("api:node-remediations", args=[theirs.node_id])).status_code == 404
    assert client.get(reverse("api:node-remediations", args=[mine.node_id])).json()["count"] == 1


def test_a_nodes_remediations_newest_first(operator):
    node = NodeFactory(state=S.TRIAGE)
    old = remediation_on(
        node,
        status=Status.STOPPED,
        created=timezone.now() - timedelta(days=3),
        finished=timezone.now() - timedelta(days=3),
    )
    new = remediation_on(node)
    body = api(operator).get(reverse("api:node-remediations", args=[node.pk])).json()
    assert [r["id"] for r in body["results"]] == [new.pk, old.pk]


def test_an_operator_approves_skips_and_stops(operator):
    waiting = remediation_on(NodeFactory(state=S.PRODUCTION), status=Status.AWAITING_APPROVAL, rung=Rung.REBOOT)
    response = post(operator, "remediation-approve", waiting.pk, "vendor says reboot")
    assert response.status_code == 200
    assert response.json()["decisions"][2]["what"] == "approved: vendor says reboot"
    running = remediation_on(NodeFactory(state=S.TRIAGE))
    response = post(operator, "remediation-skip-rung", running.pk)
    assert response.status_code == 200 and response.json()["rung"] == Rung.REIMAGE
    response = post(operator, "remediation-stop", running.pk)
    assert response.status_code == 200 and response.json()["status"] == Status.STOPPED


def test_the_verbs_answer_400_403_404_and_409(operator, viewer, customer, tenant, other_tenant):
    rem = remediation_on(NodeFactory(state=S.TRIAGE, tenant=tenant))
    assert post(operator, "remediation-approve", rem.pk).status_code == 409  # running, not awaiting approval
    assert post(operator, "remediation-stop", rem.pk, "").status_code == 400
    assert post(operator, "remediation-stop", rem.pk, "   ").status_code == 400  # whitespace is no reason
    assert post(viewer, "remediation-stop", rem.pk).status_code == 403
    assert post(customer, "remediation-stop", rem.pk).status_code == 403  # their node, but no permission
    theirs = remediation_on(NodeFactory(state=S.TRIAGE, tenant=other_tenant))
    assert post(customer, "remediation-stop", theirs.pk).status_code == 404
    assert post(operator, "remediation-stop", 999_999).status_code == 404
    assert post(operator, "remediation-stop", rem.pk).status_code == 200
    assert post(operator, "remediation-stop", rem.pk).status_code == 409  # already stopped
    assert post(operator, "remediation-skip-rung", rem.pk).status_code == 409


def test_holds_are_placed_listed_and_released(operator):
    node = NodeFactory(hostname="gpu-hold-02", state=S.PRODUCTION)
    url = reverse("api:hold-list")
    response = api(operator).post(url, {"node": node.pk, "reason": "chassis swap"}, format="json")
    assert response.status_code == 201
    hold = response.json()
    assert (hold["hostname"], hold["actor_name"], hold["active"]) == ("gpu-hold-02", "operator", True)
    cluster = ClusterFactory(name="west")
    fleet = api(operator).post(url, {"fleet": True, "reason": "incident: stop all automation"}, format="json")
    assert fleet.status_code == 201 and fleet.json()["node"] is None and fleet.json()["cluster"] is None
    assert (
        api(operator).post(url, {"node": node.pk, "cluster": cluster.pk, "reason": "x"}, format="json").status_code
        == 400
    )
    assert api(operator).post(url, {"reason": "nowhere"}, format="json").status_code == 400
    assert api(operator).post(url, {"cluster": cluster.pk, "reason": ""}, format="json").status_code == 400
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    assert (
        api(operator).post(url, {"cluster": cluster.pk, "reason": "x", "until": past}, format="json").status_code == 400
    )
    response = post(operator, "hold-release", hold["id"], "swap done")
    assert response.status_code == 200 and response.json()["active"] is False
    active = api(operator).get(url, {"active": "true"}).json()["results"]
    assert [h["id"] for h in active] == [fleet.json()["id"]]
    assert post(operator, "hold-release", 999_999).status_code == 404


def test_circuit_breakers_are_listed_and_reset_once(operator):
    breaker = CircuitBreaker.objects.create(cluster=ClusterFactory(name="east"), reason="6 of 20 nodes")
    body = api(operator).get(reverse("api:circuitbreaker-list"), {"tripped": "true"}).json()
    assert [(b["cluster_name"], b["tripped"]) for b in body["results"]] == [("east", True)]
    assert post(operator, "circuitbreaker-reset", breaker.pk, "").status_code == 400
    response = post(operator, "circuitbreaker-reset", breaker.pk, "a bad rule, fixed")
    assert response.status_code == 200 and response.json()["reset_by"] == "operator"
    assert post(operator, "circuitbreaker-reset", breaker.pk, "again").status_code == 409


def test_holds_and_breakers_are_staff_business(viewer, customer):
    breaker = CircuitBreaker.objects.create(cluster=ClusterFactory(), reason="spike")
    hold = Hold.objects.create(cluster=breaker.cluster, reason="x", actor_name="operator")
    assert api(customer).get(reverse("api:hold-list")).status_code == 404
    assert api(customer).get(reverse("api:circuitbreaker-list")).status_code == 404
    assert post(customer, "circuitbreaker-reset", breaker.pk).status_code == 404
    assert api(viewer).get(reverse("api:hold-list")).status_code == 200
    assert (
        api(viewer)
        .post(reverse("api:hold-list"), {"cluster": breaker.cluster_id, "reason": "x"}, format="json")
        .status_code
        == 403
    )
    assert post(viewer, "hold-release", hold.pk).status_code == 403
    assert post(viewer, "circuitbreaker-reset", breaker.pk).status_code == 403


@pytest.mark.parametrize("name", ["api:remediation-list", "api:hold-list", "api:circuitbreaker-list"])
def test_lists_read_a_bounded_number_of_queries(operator, name):
    def queries(rows: int) -> int:
        for _ in range(rows):
            node = NodeFactory(state=S.TRIAGE)
            remediation_on(node)
            Hold.objects.create(node=node, reason="x", actor_name="operator")
            CircuitBreaker.objects.create(cluster=node.cluster, reason="spike")
        client = api(operator)
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse(name)).status_code == 200
        return len(ctx)

    assert queries(3) == queries(30)
