"""GET /api/nodes/ and /api/nodes/{id}/: the node list page's filters, as JSON."""

from __future__ import annotations

import pytest
from django.urls import reverse

from nodes.choices import NodeState
from tests.factories import GPUFactory, NodeFactory, PersonaFactory, RackFactory

pytestmark = pytest.mark.django_db
S = NodeState


def hostnames(response):  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return [row["hostname"] for row in response.json()["results"]]


def test_it_lists_nodes_with_their_place_owner_and_state(api_as, viewer, tenant):
    node = NodeFactory(hostname="gpu-a01", tenant=tenant, state=S.BURN_IN)
    GPUFactory(node=node, index=0, uuid="GPU-aaaa")
    row = api_as(viewer).get("/api/nodes/").json()["results"][0]
    assert row["hostname"] == "gpu-a01"
    assert row["site"] == {"id": node.site.pk, "name": node.site.name, "slug": node.site.slug}
    assert row["cluster"]["name"] == node.cluster.name
    assert row["tenant"] == {"id": tenant.pk, "name": "Acme AI", "slug": "acme"}
    assert (row["state"], row["state_label"], row["phase"]) == ("burn_in", "Burn-in", "day1")
    assert [gpu["uuid"] for gpu in row["gpus"]] == ["GPU-aaaa"]
    assert row["url"].endswith(f"/api/nodes/{node.pk}/")


def test_it_paginates_with_limit_and_offset(api_as, viewer):
    for i in range(5):
        NodeFactory(hostname=f"gpu-{i}")
    body = api_as(viewer).get("/api/nodes/?limit=2&offset=2").json()
    assert body["count"] == 5
    assert [row["hostname"] for row in body["results"]] == ["gpu-2", "gpu-3"]
    assert "offset=4" in body["next"]


# The start of a value, in any case (a prefix search on indexed columns, not a substring scan).
@pytest.mark.parametrize("query", ["gpu-find-me", "GPU-FIND", "sn-fi", "10.9.9", "GPU-5eed", "5eed-0000"])
def test_it_searches_by_hostname_serial_bmc_address_and_gpu_uuid(api_as, viewer, query):
    wanted = NodeFactory(hostname="gpu-find-me", serial="SN-FIND", bmc_address="10.9.9.9")
    GPUFactory(node=wanted, uuid="GPU-5eed-0000")
    NodeFactory(hostname="gpu-other")
    assert hostnames(api_as(viewer).get("/api/nodes/", {"q": query})) == ["gpu-find-me"]


def test_it_finds_a_node_with_many_gpus_once(api_as, viewer):
    node = NodeFactory(hostname="gpu-many")
    GPUFactory(node=node, index=0, uuid="GPU-dup")
    GPUFactory(node=node, index=1)
    assert hostnames(api_as(viewer).get("/api/nodes/", {"q": "GPU-dup"})) == ["gpu-many"]


def test_it_filters_by_several_states(api_as, viewer):
    NodeFactory(hostname="a", state=S.PRODUCTION)
    NodeFactory(hostname="b", state=S.TRIAGE)
    NodeFactory(hostname="c", state=S.RMA)
    response = api_as(viewer).get("/api/nodes/", {"state": ["production", "rma"]})
    assert hostnames(response) == ["a", "c"]


def test_it_filters_by_phase_and_trouble(api_as, viewer):
    NodeFactory(hostname="a", state=S.PRODUCTION)
    NodeFactory(hostname="b", state=S.TRIAGE)
    NodeFactory(hostname="c", state=S.BURN_IN)
    client = api_as(viewer)
    assert hostnames(client.get("/api/nodes/", {"phase": "day1"})) == ["c"]
    assert hostnames(client.get("/api/nodes/", {"in_trouble": "true"})) == ["b"]


def test_it_filters_by_tenant_slug_and_unassigned_capacity(api_as, viewer, tenant, other_tenant):
    NodeFactory(hostname="acme-1", tenant=tenant)
    NodeFactory(hostname="globex-1", tenant=other_tenant)
    NodeFactory(hostname="spare-1")
    client = api_as(viewer)
    assert hostnames(client.get("/api/nodes/", {"tenant": "acme"})) == ["acme-1"]
    assert hostnames(client.get("/api/nodes/", {"unassigned": "true"})) == ["spare-1"]


def test_it_filters_by_site_cluster_rack_and_persona(api_as, viewer):
    node = NodeFactory(hostname="placed", persona=PersonaFactory(name="inference"))
    node.rack = RackFactory(site=node.site)
    node.save(update_fields=["rack"])
    NodeFactory(hostname="elsewhere")
    client = api_as(viewer)
    for query in (
        {"site": node.site.slug},
        {"cluster": node.cluster.name},
        {"rack": node.rack.pk},
        {"persona": node.persona.pk},
    ):
        assert hostnames(client.get("/api/nodes/", query)) == ["placed"], query


def test_it_sorts_with_the_node_list_ordering(api_as, viewer):
    NodeFactory(hostname="b", state=S.TRIAGE)
    NodeFactory(hostname="a", state=S.TRIAGE)
    NodeFactory(hostname="c", state=S.PRODUCTION)
    client = api_as(viewer)
    assert hostnames(client.get("/api/nodes/", {"ordering": "-hostname"})) == ["c", "b", "a"]
    # Ties within a state fall back to the hostname, so pages stay stable.
    assert hostnames(client.get("/api/nodes/", {"ordering": "-state"})) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "query",
    [
        {"state": "sleeping"},
        {"phase": "day9"},
        {"site": "nowhere"},
        {"cluster": "nope"},
        {"rack": "abc"},
        {"hardware_profile": "999999"},
        {"ordering": "bmc_password"},
    ],
)
def test_a_bad_filter_value_is_a_400_not_a_500(api_as, viewer, query):
    NodeFactory()
    response = api_as(viewer).get("/api/nodes/", query)
    assert response.status_code == 400
    assert set(response.json()["fields"]) == set(query)


def test_the_detail_shows_inventory_state_and_gpus(api_as, viewer):
    node = NodeFactory(
        hostname="gpu-d", serial="SN-D", bmc_address="10.1.1.1", state=S.FIRMWARE_UPDATE, is_revalidation=True
    )
    for index in (1, 0):
        GPUFactory(node=node, index=index, uuid=f"GPU-d{index}", serial=f"S{index}", model="H100")
    body = api_as(viewer).get(f"/api/nodes/{node.pk}/").json()
    assert (body["hostname"], body["serial"], body["bmc_address"]) == ("gpu-d", "SN-D", "10.1.1.1")
    assert body["hardware_profile"] == {"id": node.hardware_profile.pk, "name": node.hardware_profile.name}
    assert (body["rack"], body["tenant"], body["persona"]) == (None, None, None)
    assert (body["state"], body["state_label"], body["is_revalidation"]) == ("firmware_update", "Firmware update", True)
    healthy = {"health": "healthy", "health_label": "Healthy", "health_changed_at": None, "health_reason": ""}
    assert body["gpus"] == [
        {"index": 0, "uuid": "GPU-d0", "serial": "S0", "model": "H100", **healthy},
        {"index": 1, "uuid": "GPU-d1", "serial": "S1", "model": "H100", **healthy},
    ]
    assert body["usable_gpu_count"] == 2
    assert {"state_changed_at", "last_updated", "created"} <= set(body)


def test_a_missing_node_answers_404(api_as, viewer):
    assert api_as(viewer).get("/api/nodes/999999/").status_code == 404


def test_nodes_cannot_be_created_changed_or_deleted(api_as, fleet_admin):
    node = NodeFactory()
    client = api_as(fleet_admin)
    assert client.post("/api/nodes/", {"hostname": "x"}, format="json").status_code == 405
    assert client.patch(f"/api/nodes/{node.pk}/", {"state": "rma"}, format="json").status_code == 405
    assert client.delete(f"/api/nodes/{node.pk}/").status_code == 405


def test_api_route_names_do_not_shadow_the_portal_pages():
    assert reverse("node-detail", args=[7]) == "/nodes/7/"
    assert reverse("api:node-detail", args=[7]) == "/api/nodes/7/"
