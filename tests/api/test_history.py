"""GET /api/nodes/{id}/history/ and /api/nodes/{id}/transitions/: a node's past and its possible next steps."""

from __future__ import annotations

import pytest

from nodes import services
from nodes.choices import EventKind, NodeState
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
S = NodeState
SYSTEM = services.Actor.system("test")


def test_history_lists_the_nodes_events_newest_first(api_as, viewer, operator):
    node = NodeFactory(state=S.PRODUCTION)
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason="ECC errors", correlation_id="req-1")
    services.record_event(node.pk, EventKind.NOTE, actor=SYSTEM, reason="ticket OPS-12", details={"ticket": 12})
    services.record_event(NodeFactory().pk, EventKind.NOTE, actor=SYSTEM, reason="another node's note")
    body = api_as(viewer).get(f"/api/nodes/{node.pk}/history/").json()
    assert body["count"] == 2
    note, drain = body["results"]
    assert (note["kind"], note["reason"], note["details"], note["actor_name"]) == (
        "note",
        "ticket OPS-12",
        {"ticket": 12},
        "system:test",
    )
    assert drain == {
        "id": drain["id"],
        "created": drain["created"],
        "kind": "transition",
        "transition": "request_drain",
        "source_state": "production",
        "target_state": "drain_pending",
        "reason": "ECC errors",
        "actor_name": "operator",
        "actor_kind": "user",
        "correlation_id": "req-1",
        "details": {},
    }


def test_history_is_paginated(api_as, viewer):
    node = NodeFactory()
    for i in range(5):
        services.record_event(node.pk, EventKind.NOTE, actor=SYSTEM, reason=f"note {i}")
    body = api_as(viewer).get(f"/api/nodes/{node.pk}/history/?limit=2").json()
    assert body["count"] == 5 and body["next"]
    assert [row["reason"] for row in body["results"]] == ["note 4", "note 3"]


def test_history_ignores_node_list_filters(api_as, viewer):
    node = NodeFactory(state=S.PRODUCTION)
    response = api_as(viewer).get(f"/api/nodes/{node.pk}/history/", {"state": "rma"})
    assert response.status_code == 200


def test_available_transitions_follow_the_state(api_as, operator):
    node = NodeFactory(state=S.PRODUCTION)
    body = api_as(operator).get(f"/api/nodes/{node.pk}/transitions/").json()
    assert {t["name"] for t in body} == {"request_drain", "start_draining", "cordon", "start_maintenance"}
    cordon = next(t for t in body if t["name"] == "cordon")
    assert cordon == {"name": "cordon", "label": "Cordon now", "target": "triage", "style": "danger"}


def test_complete_drain_names_where_this_drain_lands(api_as, operator):
    from nodes import services

    node = NodeFactory(state=S.PRODUCTION)
    services.start_draining(node.pk, actor=services.Actor(user=operator), reason="planned: new PSU")
    body = api_as(operator).get(f"/api/nodes/{node.pk}/transitions/").json()
    assert next(t for t in body if t["name"] == "complete_drain")["target"] == "maintenance"
    other = NodeFactory(state=S.PRODUCTION)
    services.start_draining(other.pk, actor=services.Actor.system("remediation"), reason="XID 79")
    body = api_as(operator).get(f"/api/nodes/{other.pk}/transitions/").json()
    assert next(t for t in body if t["name"] == "complete_drain")["target"] == "triage"


def test_available_transitions_are_empty_for_a_viewer(api_as, viewer):
    node = NodeFactory(state=S.PRODUCTION)
    assert api_as(viewer).get(f"/api/nodes/{node.pk}/transitions/").json() == []


def test_available_transitions_never_offer_the_admin_override(api_as, fleet_admin):
    node = NodeFactory(state=S.PRODUCTION)
    names = {t["name"] for t in api_as(fleet_admin).get(f"/api/nodes/{node.pk}/transitions/").json()}
    assert "force_state" not in names and "cordon" in names


def test_the_api_history_filters_by_kind_and_refuses_a_bad_filter(api_as, operator):
    node = NodeFactory(state=S.PRODUCTION)
    services.record_event(node.pk, EventKind.NOTE, actor=SYSTEM, reason="a note")
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason="drain")
    client = api_as(operator)
    url = f"/api/nodes/{node.pk}/history/"
    assert [e["kind"] for e in client.get(url, {"kind": "note"}).json()["results"]] == ["note"]
    assert len(client.get(url, {"range": "24h"}).json()["results"]) == 2
    assert client.get(url, {"since": "soon"}).status_code == 400
    assert client.get(url, {"kind": "run"}).status_code == 200
