"""POST /api/nodes/{id}/transitions/{name}/: the API's only way to change a node's state."""

from __future__ import annotations

import pytest
from django_fsm import ConcurrentTransition

from nodes import services
from nodes.choices import NodeState
from nodes.models import NodeEvent
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
S = NodeState


def transition(client, node, name, body=None, **headers):  # type: ignore[no-untyped-def]
    body = {"reason": "XID 79 on GPU 3"} if body is None else body
    return client.post(f"/api/nodes/{node.pk}/transitions/{name}/", body, format="json", headers=headers)


def assert_unchanged(node, state):  # type: ignore[no-untyped-def]
    node.refresh_from_db()
    assert node.state == state
    assert not NodeEvent.objects.filter(node=node).exists()


def test_it_runs_a_transition_and_records_it_in_history(api_as, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client = api_as(operator)
    response = transition(client, node, "cordon", **{"X-Request-ID": "req-42"})
    assert response.status_code == 201
    body = response.json()
    assert body["node"]["id"] == node.pk
    assert (body["node"]["state"], body["node"]["state_label"]) == ("triage", "Triage")
    assert body["event"]["transition"] == "cordon" and body["event"]["actor_name"] == "operator"
    assert (body["event"]["source_state"], body["event"]["target_state"]) == ("production", "triage")
    assert body["event"]["correlation_id"] == "req-42"
    node.refresh_from_db()
    assert node.state == S.TRIAGE
    history = client.get(f"/api/nodes/{node.pk}/history/").json()["results"]
    assert [(e["id"], e["reason"]) for e in history] == [(body["event"]["id"], "XID 79 on GPU 3")]


def test_it_records_no_correlation_id_without_a_request_id(api_as, operator):
    node = NodeFactory(state=S.PRODUCTION)
    assert transition(api_as(operator), node, "request_drain").json()["event"]["correlation_id"] == ""


def test_it_refuses_a_transition_not_allowed_in_this_state_with_409(api_as, operator):
    node = NodeFactory(state=S.ENROLLED)
    response = transition(api_as(operator), node, "release_to_production")
    assert response.status_code == 409
    assert response.json()["detail"] == "Cannot release to production a node in state 'Enrolled'."
    assert_unchanged(node, S.ENROLLED)


@pytest.mark.parametrize("name", ["teleport", "force_state"])
def test_it_refuses_an_unknown_or_admin_only_transition_with_409(api_as, fleet_admin, name):
    node = NodeFactory(state=S.PRODUCTION)
    response = transition(api_as(fleet_admin), node, name)
    assert response.status_code == 409
    assert name in response.json()["detail"]
    assert_unchanged(node, S.PRODUCTION)


def test_it_answers_a_concurrent_change_with_409(api_as, operator, monkeypatch):
    def lose_the_race(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConcurrentTransition("The node changed state while this request ran.")

    monkeypatch.setattr(services, "perform", lose_the_race)
    node = NodeFactory(state=S.PRODUCTION)
    response = transition(api_as(operator), node, "cordon")
    assert response.status_code == 409 and "changed state" in response.json()["detail"]


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": None}])
def test_it_requires_a_reason_with_400(api_as, operator, body):
    node = NodeFactory(state=S.PRODUCTION)
    response = transition(api_as(operator), node, "cordon", body)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["reason"]
    assert_unchanged(node, S.PRODUCTION)


def test_a_viewer_may_look_but_not_run_transitions_403(api_as, viewer):
    node = NodeFactory(state=S.PRODUCTION)
    response = transition(api_as(viewer), node, "cordon")
    assert response.status_code == 403 and response.json()["detail"]
    assert_unchanged(node, S.PRODUCTION)


def test_permission_is_checked_before_the_state_403_not_409(api_as, viewer):
    node = NodeFactory(state=S.ENROLLED)
    assert transition(api_as(viewer), node, "release_to_production").status_code == 403


def test_a_transition_on_a_missing_node_answers_404(api_as, operator):
    response = api_as(operator).post("/api/nodes/999999/transitions/cordon/", {"reason": "x"}, format="json")
    assert response.status_code == 404


def test_a_transition_is_post_only(api_as, operator):
    node = NodeFactory(state=S.PRODUCTION)
    assert api_as(operator).get(f"/api/nodes/{node.pk}/transitions/cordon/").status_code == 405
    assert_unchanged(node, S.PRODUCTION)


@pytest.mark.parametrize("payload", ['{"reason": ', '["XID 79"]', '"XID 79"'])
def test_a_malformed_body_is_a_400_not_a_500(api_as, operator, payload):
    node = NodeFactory(state=S.PRODUCTION)
    response = api_as(operator).post(
        f"/api/nodes/{node.pk}/transitions/cordon/", payload, content_type="application/json"
    )
    assert response.status_code == 400
    assert_unchanged(node, S.PRODUCTION)
