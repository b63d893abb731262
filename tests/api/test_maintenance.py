"""The maintenance endpoints: start (a reason) and end (what was done and a reason), and their refusals."""

from __future__ import annotations

import pytest

from nodes.choices import NodeState
from nodes.models import NodeEvent
from tests.factories import NodeFactory
from tests.validation.conftest import eager  # noqa: F401  (fixture)

S = NodeState
pytestmark = pytest.mark.django_db


def post(client, node, what, body):
    return client.post(f"/api/nodes/{node.pk}/maintenance/{what}/", body, content_type="application/json")


def test_start_then_end_maintenance(client, operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    with eager():
        response = post(client, node, "start", {"reason": "Swap NIC 2"})
    assert response.status_code == 201, response.content
    assert response.json()["event"]["transition"] == "start_maintenance"
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
    response = post(client, node, "end", {"work": "hardware", "reason": "NIC 2 swapped"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["node"]["state"] == S.FIRMWARE_UPDATE and body["event"]["transition"] == "end_maintenance"
    assert NodeEvent.objects.get(transition="end_maintenance").details == {"maintenance_work": "hardware"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"reason": "done"}, "work"),
        ({"work": "lots", "reason": "done"}, "work"),
        ({"work": "none"}, "reason"),
        ({"work": "none", "reason": "   "}, "reason"),
    ],
)
def test_end_maintenance_refuses_bad_input_with_400(client, operator, body, field):
    node = NodeFactory(state=S.MAINTENANCE)
    client.force_login(operator)
    response = post(client, node, "end", body)
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE and not NodeEvent.objects.exists()


def test_end_maintenance_of_a_node_not_in_maintenance_is_a_409(client, operator):
    node = NodeFactory(state=S.TRIAGE)
    client.force_login(operator)
    response = post(client, node, "end", {"work": "none", "reason": "done"})
    assert response.status_code == 409, response.content
    assert "Cannot end maintenance a node in state 'Triage'" in response.json()["detail"]
    response = post(client, node, "start", {"reason": "planned"})
    assert response.status_code == 409, response.content
    node.refresh_from_db()
    assert node.state == S.TRIAGE


def test_a_viewer_may_not_and_a_customer_sees_no_such_node(client, viewer, customer):
    node = NodeFactory(state=S.MAINTENANCE)
    client.force_login(viewer)
    assert post(client, node, "end", {"work": "none", "reason": "done"}).status_code == 403
    client.force_login(customer)
    assert post(client, node, "end", {"work": "none", "reason": "done"}).status_code == 404
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
