"""GET /api/sites/, /clusters/, /tenants/, /hardware-profiles/ and /personas/: the inventory vocabulary."""

from __future__ import annotations

import pytest

from tests.factories import ClusterFactory, HardwareProfileFactory, PersonaFactory, SiteFactory, TenantFactory

pytestmark = pytest.mark.django_db

# (endpoint, factory, the field that names a row)
RESOURCES = [
    ("sites", SiteFactory, "slug"),
    ("clusters", ClusterFactory, "name"),
    ("tenants", TenantFactory, "slug"),
    ("hardware-profiles", HardwareProfileFactory, "name"),
    ("personas", PersonaFactory, "name"),
]


@pytest.mark.parametrize(("endpoint", "factory", "key"), RESOURCES)
def test_it_lists_and_shows_each_resource(api_as, viewer, endpoint, factory, key):
    obj = factory()
    client = api_as(viewer)
    listed = client.get(f"/api/{endpoint}/").json()
    assert [row[key] for row in listed["results"]] == [getattr(obj, key)]
    detail = client.get(f"/api/{endpoint}/{obj.pk}/").json()
    assert detail["id"] == obj.pk and detail["url"].endswith(f"/api/{endpoint}/{obj.pk}/")


@pytest.mark.parametrize(("endpoint", "factory", "key"), RESOURCES)
def test_each_resource_is_read_only(api_as, fleet_admin, endpoint, factory, key):
    obj = factory()
    client = api_as(fleet_admin)
    assert client.post(f"/api/{endpoint}/", {"name": "x"}, format="json").status_code == 405
    assert client.delete(f"/api/{endpoint}/{obj.pk}/").status_code == 405


def test_a_cluster_names_its_site_and_scheduler(api_as, viewer):
    cluster = ClusterFactory(name="hgx-east", scheduler_kind="slurm", scheduler_endpoint="slurmctld.east")
    row = api_as(viewer).get(f"/api/clusters/{cluster.pk}/").json()
    assert row["site"] == {"id": cluster.site.pk, "name": cluster.site.name, "slug": cluster.site.slug}
    assert (row["scheduler_kind"], row["scheduler_endpoint"]) == ("slurm", "slurmctld.east")


def test_a_hardware_profile_shows_its_firmware_baseline(api_as, viewer):
    profile = HardwareProfileFactory()
    row = api_as(viewer).get(f"/api/hardware-profiles/{profile.pk}/").json()
    assert row["firmware_baseline"] == {"bios": "1.8.2", "bmc": "5.10"} and row["gpu_count"] == 8


def test_sites_sort_by_name(api_as, viewer):
    SiteFactory(name="Beta", slug="beta")
    SiteFactory(name="Alpha", slug="alpha")
    body = api_as(viewer).get("/api/sites/", {"ordering": "-name"}).json()
    assert [row["name"] for row in body["results"]] == ["Beta", "Alpha"]
