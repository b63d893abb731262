"""The operator's side: POST/GET /api/nodes/{id}/checks/, GET /api/checks/{id}/, cancel."""

from __future__ import annotations

import pytest

from checks import services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def url(node) -> str:
    return f"/api/nodes/{node.pk}/checks/"


def ask(client, node, kind="gpu_stress", params=None, reason="suspected slow GPU"):
    return client.post(url(node), {"kind": kind, "params": params or {}, "reason": reason}, format="json")


# --- Requesting -------------------------------------------------------------------
def test_an_operator_requests_a_check(api_as, operator, node):
    response = ask(api_as(operator), node, params={"seconds": 300, "dtype": "fp16"})

    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["kind"], data["status"], data["requested_by"]) == ("gpu_stress", "queued", "operator")
    assert data["params"] == {"seconds": 300, "matrix_size": 8192, "dtype": "fp16", "min_tflops": 0.0}
    assert Run.objects.get(pk=data["id"]).requested_reason == "suspected slow GPU"


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"kind": "burn", "reason": "r"}, "kind", "Unknown check kind 'burn'"),
        ({"kind": "transition_followup", "reason": "r"}, "kind", "Unknown check kind"),
        (
            {"kind": "gpu_stress", "params": {"seconds": 0}, "reason": "r"},
            "params",
            "seconds: must be a whole number from 1 to 3600 (got 0)",
        ),
        ({"kind": "dcgm_diag", "params": {"lvl": 2}, "reason": "r"}, "params", "lvl: unknown parameter"),
        ({"kind": "dcgm_diag", "params": "level 2", "reason": "r"}, "params", "Must be a JSON object."),
        ({"kind": "dcgm_diag", "reason": "  "}, "reason", "blank"),
        ({"reason": "r"}, "kind", "required"),
    ],
)
def test_a_bad_request_is_a_clear_400(api_as, operator, node, payload, field, message):
    response = api_as(operator).post(url(node), payload, format="json")
    assert response.status_code == 400
    assert message in " ".join(response.json()["fields"][field]), response.json()
    assert not Run.objects.exists()


def test_a_second_open_check_of_the_same_kind_is_409(api_as, operator, node):
    client = api_as(operator)
    ask(client, node, "dcgm_diag")
    response = ask(client, node, "dcgm_diag")
    assert response.status_code == 409 and "already queued or running" in response.json()["detail"]


def test_a_decommissioned_node_takes_no_checks(api_as, operator):
    node = NodeFactory(state=NodeState.DECOMMISSIONED)
    response = ask(api_as(operator), node)
    assert response.status_code == 409 and "Decommissioned" in response.json()["detail"]


def test_customers_and_viewers_may_not_request_checks(api_as, customer, viewer, node):
    assert ask(api_as(customer), node).status_code == 403
    assert ask(api_as(viewer), node).status_code == 403
    assert not Run.objects.exists()


def test_a_node_the_user_cannot_see_is_404_before_any_permission_answer(api_as, customer, operator):
    hidden = NodeFactory(production=True)  # not the customer's tenant
    assert ask(api_as(customer), hidden).status_code == 404
    assert api_as(customer).get(url(hidden)).status_code == 404
    assert ask(api_as(operator), NodeFactory.build(pk=987654)).status_code == 404


def test_anonymous_requests_are_refused(client, node):
    assert client.post(url(node), {"kind": "dcgm_diag", "reason": "r"}).status_code in (401, 403)


# --- Reading ------------------------------------------------------------------------
def test_the_list_shows_the_nodes_runs_newest_first_including_follow_ups(api_as, operator, node):
    follow_up = Run.objects.create(node=node, kind=RunKind.TRANSITION_FOLLOWUP, status=RunStatus.PASSED)
    ask(api_as(operator), node, "dcgm_diag")
    Run.objects.create(node=NodeFactory(), kind=RunKind.TRANSITION_FOLLOWUP)  # another node's

    response = api_as(operator).get(url(node))
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [r["kind"] for r in rows] == ["dcgm_diag", "transition_followup"]
    assert rows[1]["id"] == follow_up.pk and "output" not in rows[0]


def test_a_customer_reads_its_own_nodes_runs(api_as, customer, operator, node):
    run = services.request_check(node.pk, "dcgm_diag", actor=Actor(user=operator), reason="routine")
    client = api_as(customer)

    assert [r["id"] for r in client.get(url(node)).json()["results"]] == [run.pk]
    detail = client.get(f"/api/checks/{run.pk}/")
    assert detail.status_code == 200 and detail.json()["output"] == ""
    other = Run.objects.create(node=NodeFactory(), kind=RunKind.TRANSITION_FOLLOWUP)
    assert client.get(f"/api/checks/{other.pk}/").status_code == 404


def test_the_list_costs_the_same_number_of_queries_for_many_runs(api_as, operator, node, django_assert_max_num_queries):
    client = api_as(operator)
    for kind in ("gpu_stress", "dcgm_diag", "nccl_test", "memory_test"):
        ask(client, node, kind)
    Run.objects.bulk_create(Run(node=node, kind=RunKind.TRANSITION_FOLLOWUP) for _ in range(20))
    # session/user, the node lookup, the count and the page (requested_by joined): not one per row.
    with django_assert_max_num_queries(6):
        assert len(client.get(url(node)).json()["results"]) == 24


# --- Cancelling ---------------------------------------------------------------------
def test_an_operator_cancels_a_queued_check_and_a_customer_may_not(api_as, operator, customer, node):
    run_id = ask(api_as(operator), node, "memory_test").json()["id"]
    cancel = f"/api/checks/{run_id}/cancel/"

    assert api_as(customer).post(cancel, {"reason": "no"}, format="json").status_code == 403
    assert api_as(operator).post(cancel, {}, format="json").status_code == 400
    response = api_as(operator).post(cancel, {"reason": "wrong node"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert api_as(operator).post(cancel, {"reason": "again"}, format="json").status_code == 409
    assert NodeEvent.objects.filter(node=node, details__check_cancelled="memory_test").count() == 1
