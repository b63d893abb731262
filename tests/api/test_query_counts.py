"""List endpoints cost the same number of queries for 3 rows as for 30: no N+1."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from nodes import services
from nodes.choices import EventKind
from tests.factories import ClusterFactory, GPUFactory, NodeFactory, PersonaFactory, RackFactory

pytestmark = pytest.mark.django_db


def queries_for(user, url: str) -> int:
    """Queries one GET costs, for a freshly loaded user (so no lookup is cached from a previous request)."""
    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


def add_nodes(count: int, tenant) -> None:  # type: ignore[no-untyped-def]
    """Nodes with every relation filled, each with its own site, cluster and rack, and two GPUs."""
    for _ in range(count):
        node = NodeFactory(tenant=tenant, persona=PersonaFactory())
        node.rack = RackFactory(site=node.site)
        node.save(update_fields=["rack"])
        GPUFactory.create_batch(2, node=node)


@pytest.mark.parametrize("persona", ["operator", "customer"])
def test_the_node_list_costs_the_same_for_3_and_30_nodes(request, tenant, persona):
    user = request.getfixturevalue(persona)
    add_nodes(3, tenant)
    few = queries_for(user, "/api/nodes/")
    add_nodes(27, tenant)
    assert queries_for(user, "/api/nodes/") == few


def test_a_search_by_gpu_uuid_costs_the_same_for_3_and_30_nodes(operator, tenant):
    add_nodes(3, tenant)
    few = queries_for(operator, "/api/nodes/?q=GPU-&state=enrolled&ordering=site")
    add_nodes(27, tenant)
    assert queries_for(operator, "/api/nodes/?q=GPU-&state=enrolled&ordering=site") == few


def test_the_node_list_is_a_count_a_page_and_the_pages_gpus(operator, tenant, django_assert_num_queries):
    add_nodes(3, tenant)
    client = APIClient()
    client.force_authenticate(operator)
    with django_assert_num_queries(3):
        client.get("/api/nodes/")


@pytest.mark.parametrize("persona", ["operator", "customer"])
def test_history_costs_the_same_for_3_and_30_events(request, tenant, persona):
    user = request.getfixturevalue(persona)
    node = NodeFactory(tenant=tenant)

    def add_events(count: int) -> None:
        for i in range(count):
            services.record_event(node.pk, EventKind.NOTE, actor=services.Actor(user=user), reason=f"note {i}")

    add_events(3)
    few = queries_for(user, f"/api/nodes/{node.pk}/history/")
    add_events(27)
    assert queries_for(user, f"/api/nodes/{node.pk}/history/") == few


def test_the_cluster_list_costs_the_same_for_3_and_30_clusters(operator):
    ClusterFactory.create_batch(3)
    few = queries_for(operator, "/api/clusters/")
    ClusterFactory.create_batch(27)
    assert queries_for(operator, "/api/clusters/") == few
