"""The admin's "Enroll node" page: a form over ``enrollment.enroll``, against the real Redfish emulator."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from django.urls import reverse

from bmc.models import BmcEndpoint
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import _require, fast_bmc_settings  # noqa: F401  (autouse here too)
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory, SiteFactory
from tests.validation import conftest as day1_fixtures

pytestmark = pytest.mark.django_db
eager = day1_fixtures.eager  # the fixture: follow-up tasks run inline when the test 'commits'
ENROLL = "/admin/provisioning/bootconfig/enroll/"


@pytest.fixture(scope="module")
def bmc():
    _require(importlib.util.find_spec("sushy_tools") is not None, "sushy-tools")
    with RedfishEmulator([{"name": "bay-01", "bios_version": "1.2.0"}], power_delay=0) as emulator:
        yield emulator


@pytest.fixture
def fleet(db):
    site = SiteFactory(slug="dc1")
    ClusterFactory(site=site, name="hpc-a")
    ClusterFactory(site=SiteFactory(slug="dc2"), name="hpc-b")
    HardwareProfileFactory(name="HGX H100 8-GPU")


@pytest.fixture
def admin_client(client, fleet_admin):
    client.force_login(fleet_admin)
    return client


def a_form(bmc: RedfishEmulator, **overrides: Any) -> dict[str, Any]:
    return {
        "hostname": "gpu-adm01",
        "serial": "SN-ADM01",
        "bmc_driver": "redfish",
        "bmc_address": bmc.url,
        "bmc_system_id": "",
        "bmc_username": bmc.username,
        "bmc_password": bmc.password,
        "bmc_verify_tls": "on",
        "hardware_profile": "HGX H100 8-GPU",
        "site": "dc1",
        "cluster": "hpc-a",
        "rack": "",
        "tenant": "",
        "persona": "",
        "start": "on",
        "reason": "Racked by hand",
        **overrides,
    }


def test_the_page_is_named_and_offers_a_password_input_that_starts_empty(admin_client, fleet):
    assert reverse("admin:provisioning_enroll_node") == ENROLL
    page = admin_client.get(ENROLL)
    assert page.status_code == 200
    body = page.content.decode()
    assert '<input type="password" name="bmc_password"' in body
    assert '<option value="HGX H100 8-GPU">' in body and '<option value="dc1">' in body


def test_the_provisioning_pages_link_to_it(admin_client, fleet):
    for page in ("/admin/provisioning/", "/admin/provisioning/bootconfig/"):
        assert f'href="{ENROLL}"'.encode() in admin_client.get(page).content


def test_enrolling_records_the_admin_and_the_reason_and_opens_the_node(admin_client, fleet_admin, bmc, fleet, eager):
    bmc.set_power(False)
    with eager():
        response = admin_client.post(ENROLL, a_form(bmc))

    node = Node.objects.get(hostname="gpu-adm01")
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:nodes_node_change", args=[node.pk])
    event = NodeEvent.objects.filter(node=node).earliest("created", "id")
    assert (event.actor, event.reason.split(" (the BMC")[0]) == (fleet_admin, "Racked by hand")
    assert BmcEndpoint.objects.get(node=node).password == bmc.password
    node.refresh_from_db()
    assert node.state == NodeState.INITIALIZING and bmc.system()["PowerState"] == "On"
    page = admin_client.get(response["Location"])
    assert b"Enrolled gpu-adm01. Day 0 started" in page.content


def test_a_wrong_password_is_a_form_error_and_is_never_echoed(admin_client, bmc, fleet):
    response = admin_client.post(ENROLL, a_form(bmc, bmc_password="hunter2-wrong"))
    assert response.status_code == 200
    body = response.content.decode()
    assert f"refused user {bmc.username!r}".replace("'", "&#x27;") in body
    assert "hunter2-wrong" not in body and bmc.password not in body
    assert 'value="gpu-adm01"' in body  # the rest of the form is kept
    assert not Node.objects.exists() and not BmcEndpoint.objects.exists() and not NodeEvent.objects.exists()


def test_refusals_are_shown_on_their_fields(admin_client, bmc, fleet):
    NodeFactory(hostname="gpu-old", serial="SN-ADM01")
    before = Node.objects.count()
    response = admin_client.post(ENROLL, a_form(bmc, cluster="hpc-b"))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert errors == {"cluster": ["Cluster 'hpc-b' is in site 'dc2', not 'dc1'."]}
    response = admin_client.post(ENROLL, a_form(bmc))
    assert response.context["form"].errors == {"serial": ["'SN-ADM01' is already enrolled as gpu-old (Enrolled)."]}
    assert Node.objects.count() == before and not BmcEndpoint.objects.exists()


def test_the_form_needs_a_reason_and_the_required_fields(admin_client, bmc, fleet):
    response = admin_client.post(ENROLL, a_form(bmc, reason="", hostname="", site=""))
    assert set(response.context["form"].errors) == {"reason", "hostname", "site"}
    assert not Node.objects.exists()


def test_a_viewer_may_not_enroll(client, viewer, bmc, fleet):
    client.force_login(viewer)
    assert client.get(ENROLL).status_code == 403
    assert client.post(ENROLL, a_form(bmc)).status_code == 403
    assert not Node.objects.exists()
