"""Tenant scoping, exactly as on the pages: a customer sees its own nodes and nothing
else, and another tenant's node answers 404 so its existence does not leak."""

from __future__ import annotations

import pytest

from nodes import services
from nodes.choices import EventKind, NodeState
from tests.factories import NodeFactory, UserFactory

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def own_node(tenant):
    return NodeFactory(hostname="acme-1", tenant=tenant, state=S.PRODUCTION)


@pytest.fixture
def foreign_node(other_tenant):
    return NodeFactory(hostname="globex-1", tenant=other_tenant, state=S.PRODUCTION)


def test_a_customer_lists_only_its_tenants_nodes(api_as, customer, own_node, foreign_node):
    NodeFactory(hostname="spare-1")
    body = api_as(customer).get("/api/nodes/").json()
    assert [row["hostname"] for row in body["results"]] == ["acme-1"]


def test_filtering_by_another_tenant_is_refused_like_an_unknown_one(api_as, customer, own_node, foreign_node):
    # Same answer as for a made-up slug, so a customer cannot learn which tenant slugs exist.
    foreign = api_as(customer).get("/api/nodes/", {"tenant": "globex"})
    unknown = api_as(customer).get("/api/nodes/", {"tenant": "no-such-tenant"})
    assert foreign.status_code == unknown.status_code == 400
    assert foreign.json().keys() == unknown.json().keys()


def test_searching_does_not_reach_past_the_tenant(api_as, customer, own_node, foreign_node):
    assert api_as(customer).get("/api/nodes/", {"q": "globex"}).json()["count"] == 0


@pytest.mark.parametrize("suffix", ["", "history/", "transitions/"])
def test_another_tenants_node_answers_404(api_as, customer, foreign_node, suffix):
    assert api_as(customer).get(f"/api/nodes/{foreign_node.pk}/{suffix}").status_code == 404


def test_a_transition_on_another_tenants_node_answers_404(api_as, customer, foreign_node):
    response = api_as(customer).post(
        f"/api/nodes/{foreign_node.pk}/transitions/cordon/", {"reason": "x"}, format="json"
    )
    assert response.status_code == 404
    foreign_node.refresh_from_db()
    assert foreign_node.state == S.PRODUCTION


def test_a_customer_may_read_but_not_change_its_own_node(api_as, customer, own_node):
    client = api_as(customer)
    assert client.get(f"/api/nodes/{own_node.pk}/").status_code == 200
    assert client.get(f"/api/nodes/{own_node.pk}/transitions/").json() == []
    response = client.post(f"/api/nodes/{own_node.pk}/transitions/cordon/", {"reason": "x"}, format="json")
    assert response.status_code == 403
    own_node.refresh_from_db()
    assert own_node.state == S.PRODUCTION


def test_a_customer_reads_its_own_nodes_history(api_as, customer, own_node):
    services.record_event(own_node.pk, EventKind.NOTE, actor=services.Actor.system("test"), reason="checked")
    body = api_as(customer).get(f"/api/nodes/{own_node.pk}/history/").json()
    assert [row["reason"] for row in body["results"]] == ["checked"]


def test_a_customer_sees_only_its_own_tenant(api_as, customer, tenant, other_tenant):
    client = api_as(customer)
    assert [row["slug"] for row in client.get("/api/tenants/").json()["results"]] == ["acme"]
    assert client.get(f"/api/tenants/{tenant.pk}/").status_code == 200
    assert client.get(f"/api/tenants/{other_tenant.pk}/").status_code == 404


def test_a_user_with_neither_staff_nor_tenant_sees_nothing(api_as, own_node):
    client = api_as(UserFactory(username="drifter"))
    assert client.get("/api/nodes/").json()["count"] == 0
    assert client.get("/api/tenants/").json()["count"] == 0
    assert client.get(f"/api/nodes/{own_node.pk}/").status_code == 404


def test_staff_see_every_tenant(api_as, viewer, own_node, foreign_node):
    client = api_as(viewer)
    assert client.get("/api/nodes/").json()["count"] == 2
    assert client.get("/api/tenants/").json()["count"] == 2
