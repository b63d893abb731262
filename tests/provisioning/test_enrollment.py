"""Enrollment (``provisioning.enrollment.enroll`` and POST /api/enrollments/), against the real
sushy-tools Redfish emulator: a node enters the fleet by its BMC, or nothing is written."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from bmc.models import BmcEndpoint
from nodes.choices import EventKind, NodeState
from nodes.models import Node, NodeEvent
from nodes.services import Actor
from nodewarden.errors import TransitionForbidden
from provisioning import enrollment
from provisioning.enrollment import EnrollmentConflict, EnrollmentError, EnrollmentRequest, enroll
from provisioning.models import BootConfig, JoinToken
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import _require, fast_bmc_settings  # noqa: F401  (autouse here too)
from tests.factories import (
    ClusterFactory,
    HardwareProfileFactory,
    NodeFactory,
    PersonaFactory,
    RackFactory,
    SiteFactory,
)
from tests.validation import conftest as day1_fixtures

pytestmark = pytest.mark.django_db
eager = day1_fixtures.eager  # the fixture: follow-up tasks run inline when the test 'commits'
URL = "/api/enrollments/"
# sushy-tools' fake driver serves one chassis for every system, and that chassis's serial.
EMULATOR_SERIAL = "437XR1138R2"
SYSTEMS = [
    {"name": "bay-01", "bios_version": "1.2.0", "memory_gib": 2048, "cpus": 112},
    {"name": "bay-02", "bios_version": "1.2.0", "memory_gib": 2048, "cpus": 112},
]
STRING_FIELDS = [
    "hostname",
    "serial",
    "bmc_address",
    "bmc_system_id",
    "bmc_username",
    "bmc_password",
    "hardware_profile",
    "site",
    "cluster",
    "rack",
    "tenant",
    "persona",
    "reason",
]


@pytest.fixture(scope="module")
def bmc():
    """One BMC serving two systems (a two-bay chassis), power changes showing at once."""
    _require(importlib.util.find_spec("sushy_tools") is not None, "sushy-tools")
    with RedfishEmulator(SYSTEMS, power_delay=0) as emulator:
        yield emulator


@pytest.fixture
def fleet(db, tenant):
    """Site dc1 with its cluster, rack, profile and persona; a cluster elsewhere."""
    site = SiteFactory(name="DC 1", slug="dc1")
    return {
        "site": site,
        "cluster": ClusterFactory(site=site, name="hpc-a"),
        "rack": RackFactory(site=site, name="r01"),
        "profile": HardwareProfileFactory(),
        "persona": PersonaFactory(),
        "tenant": tenant,
        "elsewhere": ClusterFactory(site=SiteFactory(slug="dc2"), name="hpc-b"),
    }


def a_node(bmc: RedfishEmulator, fleet: dict[str, Any], index: int = 0, **overrides: Any) -> dict[str, Any]:
    """The API body enrolling bay ``index`` of the emulator's chassis."""
    return {
        "hostname": f"gpu-e{index + 1:02d}.dc1.example.com",
        "serial": f"SN-E{index + 1:04d}",
        "bmc_address": bmc.url,
        "bmc_system_id": bmc.systems[index]["uuid"],
        "bmc_username": bmc.username,
        "bmc_password": bmc.password,
        "hardware_profile": fleet["profile"].name,
        "site": "dc1",
        "cluster": "hpc-a",
        "rack": "r01",
        "tenant": "acme",
        "persona": fleet["persona"].name,
        "reason": "Racked in bay 1",
        **overrides,
    }


def a_request(bmc: RedfishEmulator, fleet: dict[str, Any], index: int = 0, **overrides: Any) -> EnrollmentRequest:
    body = a_node(bmc, fleet, index, **overrides)
    body.pop("reason")
    return EnrollmentRequest(**body)


def written() -> tuple[int, int, int]:
    """What an enrollment writes: nodes, BMC endpoints, history rows."""
    return Node.objects.count(), BmcEndpoint.objects.count(), NodeEvent.objects.count()


def post(client: Any, body: dict[str, Any]) -> Any:
    return client.post(URL, body, format="json")


# --- The API: a node enrolled and booted ---------------------------------------------------------
def test_the_route_is_named_enrollments():
    assert reverse("api:enrollments") == URL


def test_an_operator_enrolls_a_node_and_day_0_boots_it_from_the_network(api_as, operator, bmc, fleet, eager):
    bmc.set_power(False, 0)
    with eager():
        response = post(api_as(operator), a_node(bmc, fleet))

    assert response.status_code == 201, response.json()
    data = response.json()
    assert set(data) == {"id", "hostname", "serial", "state"}
    assert (data["hostname"], data["serial"]) == ("gpu-e01.dc1.example.com", "SN-E0001")
    assert bmc.password not in response.content.decode()
    node = Node.objects.select_related("bmc").get(pk=data["id"])
    assert (node.site, node.cluster, node.rack) == (fleet["site"], fleet["cluster"], fleet["rack"])
    assert (node.tenant, node.hardware_profile, node.persona) == (fleet["tenant"], fleet["profile"], fleet["persona"])
    assert node.bmc_address == bmc.url.removeprefix("http://")
    assert node.state == NodeState.INITIALIZING
    assert BootConfig.objects.filter(node=node).exists()
    assert JoinToken.objects.filter(node=node, used_at__isnull=True, revoked_at__isnull=True).count() == 1
    system = bmc.system(0)
    assert system["PowerState"] == "On"
    # sushy-tools keeps the target but always reports the override as Continuous (tests/bmc).
    assert system["Boot"]["BootSourceOverrideTarget"] == "Pxe"


def test_the_bmc_password_is_stored_encrypted(api_as, operator, bmc, fleet):
    response = post(api_as(operator), a_node(bmc, fleet, start=False))
    endpoint = BmcEndpoint.objects.get(node_id=response.json()["id"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT password FROM bmc_bmcendpoint WHERE id = %s", [endpoint.pk])
        stored = cursor.fetchone()[0]
    assert endpoint.password == bmc.password
    assert stored.startswith("gAAAAA") and bmc.password not in stored
    assert (endpoint.address, endpoint.system_id, endpoint.username) == (bmc.url, bmc.systems[0]["uuid"], bmc.username)


def test_the_enrolled_history_row_keeps_the_bmcs_facts_and_never_the_password(api_as, operator, bmc, fleet):
    response = post(api_as(operator), a_node(bmc, fleet, start=False))
    event = NodeEvent.objects.get(node_id=response.json()["id"])
    assert (event.kind, event.source_state, event.actor, event.hostname) == (
        EventKind.ACTION,
        NodeState.ENROLLED,
        operator,
        "gpu-e01.dc1.example.com",
    )
    facts = event.details["bmc_inventory"]
    assert facts["serial"] == EMULATOR_SERIAL
    assert (facts["bios_version"], facts["memory_gib"], facts["processor_count"]) == ("1.2.0", 2048.0, 112)
    assert event.details["enrolled"]["serial"] == "SN-E0001" and "bmc_password" not in event.details["enrolled"]
    # The chassis's serial is not the node's: recorded, not refused.
    assert event.reason == f"Racked in bay 1 (the BMC reports serial {EMULATOR_SERIAL!r}, not 'SN-E0001')"
    assert bmc.password not in str(event.details)


def test_without_start_the_node_stays_enrolled_and_its_power_is_left_alone(api_as, operator, bmc, fleet, eager):
    bmc.set_power(False, 1)
    with eager():
        response = post(api_as(operator), a_node(bmc, fleet, 1, start=False))

    assert response.status_code == 201, response.json()
    assert response.json()["state"] == NodeState.ENROLLED
    node = Node.objects.get(pk=response.json()["id"])
    assert node.state == NodeState.ENROLLED and not BootConfig.objects.filter(node=node).exists()
    assert bmc.system(1)["PowerState"] == "Off"


def test_a_second_bay_of_the_same_bmc_is_not_a_duplicate(api_as, operator, bmc, fleet):
    client = api_as(operator)
    assert post(client, a_node(bmc, fleet, 0, start=False)).status_code == 201
    assert post(client, a_node(bmc, fleet, 1, start=False)).status_code == 201
    assert BmcEndpoint.objects.filter(address=bmc.url).count() == 2


# --- The API: bad input writes nothing ---------------------------------------------------------
def test_every_missing_field_is_named(api_as, operator, fleet):
    before = written()
    response = post(api_as(operator), {})
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {
        "hostname",
        "serial",
        "bmc_address",
        "bmc_username",
        "bmc_password",
        "hardware_profile",
        "site",
    }
    assert written() == before


def test_every_unknown_reference_is_named(api_as, operator, bmc, fleet):
    before = written()
    response = post(
        api_as(operator),
        a_node(
            bmc,
            fleet,
            site="nowhere",
            hardware_profile="Abacus 9000",
            cluster="no-such",
            tenant="initech",
            persona="juggler",
        ),
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "site": ["No site 'nowhere'."],
        "hardware_profile": ["No hardware profile 'Abacus 9000'."],
        "cluster": ["No cluster 'no-such'."],
        "tenant": ["No tenant 'initech'."],
        "persona": ["No persona 'juggler'."],
    }
    assert written() == before


def test_an_unknown_rack_is_named(api_as, operator, bmc, fleet):
    response = post(api_as(operator), a_node(bmc, fleet, rack="r99"))
    assert response.status_code == 400
    assert response.json()["fields"] == {"rack": ["No rack 'r99' in site 'dc1'."]}


def test_a_cluster_in_another_site_is_refused(api_as, operator, bmc, fleet):
    before = written()
    response = post(api_as(operator), a_node(bmc, fleet, cluster="hpc-b"))
    assert response.status_code == 400
    assert response.json()["fields"] == {"cluster": ["Cluster 'hpc-b' is in site 'dc2', not 'dc1'."]}
    assert written() == before


@pytest.mark.parametrize(
    ("field", "existing"),
    [
        ("serial", {"serial": "SN-E0001"}),
        ("hostname", {"hostname": "GPU-E01.dc1.example.com"}),  # hostnames compare as DNS does
    ],
)
def test_a_serial_or_hostname_already_in_the_fleet_is_a_conflict(api_as, operator, bmc, fleet, field, existing):
    NodeFactory(**existing)
    before = written()
    response = post(api_as(operator), a_node(bmc, fleet))
    assert response.status_code == 409
    assert response.json()["detail"].startswith(f"{field}: ")
    assert written() == before


def test_a_bmc_system_already_in_the_fleet_is_a_conflict(api_as, operator, bmc, fleet):
    taken = NodeFactory(hostname="gpu-old")
    BmcEndpoint.objects.create(node=taken, address=bmc.url, system_id=bmc.systems[0]["uuid"], username="admin")
    before = written()
    response = post(api_as(operator), a_node(bmc, fleet))
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"bmc_address: BMC {bmc.url} system {bmc.systems[0]['uuid']} is already enrolled as gpu-old (Enrolled)."
    )
    assert written() == before


def test_an_unreachable_bmc_is_named_and_nothing_is_written(api_as, operator, bmc, fleet):
    before = written()
    response = post(
        api_as(operator), a_node(bmc, fleet, bmc_address="http://127.0.0.1:9", bmc_password="hunter2-not-shown")
    )
    assert response.status_code == 400
    message = response.json()["fields"]["bmc_address"][0]
    assert message.startswith("The BMC could not be read: ") and "Redfish BMC http://127.0.0.1:9" in message
    assert "hunter2-not-shown" not in response.content.decode()
    assert written() == before


def test_a_wrong_password_is_named_never_repeated_and_nothing_is_written(api_as, operator, bmc, fleet):
    before = written()
    response = post(api_as(operator), a_node(bmc, fleet, bmc_password="hunter2-wrong"))
    assert response.status_code == 400
    message = response.json()["fields"]["bmc_address"][0]
    assert bmc.url in message and f"refused user {bmc.username!r}" in message
    assert "hunter2-wrong" not in response.content.decode() and bmc.password not in response.content.decode()
    assert written() == before


def test_a_bmc_with_several_systems_needs_the_system_id(api_as, operator, bmc, fleet):
    response = post(api_as(operator), a_node(bmc, fleet, bmc_system_id=""))
    assert response.status_code == 400
    assert "set the endpoint's system_id" in response.json()["fields"]["bmc_address"][0]


def test_credentials_in_the_bmc_address_are_refused_before_it_is_dialled(api_as, operator, bmc, fleet):
    before = written()
    response = post(api_as(operator), a_node(bmc, fleet, bmc_address="http://admin:hunter2@127.0.0.1:9"))
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "bmc_address": ["Put the BMC user and password in their own fields, not in the address."]
    }
    assert written() == before


@pytest.mark.parametrize("field", STRING_FIELDS)
def test_a_nul_character_is_a_400_never_a_500(api_as, operator, bmc, fleet, field):
    before = written()
    body = a_node(bmc, fleet)
    body[field] += "\x00"
    response = post(api_as(operator), body)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [field]
    assert written() == before


def test_a_viewer_may_not_enroll(api_as, viewer, bmc, fleet):
    response = post(api_as(viewer), a_node(bmc, fleet))
    assert response.status_code == 403
    assert written() == (0, 0, 0)


def test_anonymous_callers_are_refused(api_client_anonymous, bmc, fleet):
    assert post(api_client_anonymous, a_node(bmc, fleet)).status_code in (401, 403)
    assert written() == (0, 0, 0)


# --- The service: what every road (API, import, admin) relies on ---------------------------------
def test_the_service_refuses_a_nul_character_itself(bmc, fleet):
    with pytest.raises(EnrollmentError) as refused:
        enroll(a_request(bmc, fleet, hostname="gpu\x00", rack="r\x00"), actor=Actor.system("tests"))
    assert refused.value.errors == {
        "hostname": ["May not contain a NUL character."],
        "rack": ["May not contain a NUL character."],
    }
    assert written() == (0, 0, 0)


def test_the_service_checks_lengths_the_api_would_have(bmc, fleet):
    with pytest.raises(EnrollmentError) as refused:
        enroll(a_request(bmc, fleet, serial="S" * 101, bmc_username="u" * 65), actor=Actor.system("tests"))
    assert set(refused.value.errors) == {"serial", "bmc_username"}
    assert "at most 100 characters" in refused.value.errors["serial"][0]


def test_the_service_needs_a_reason(bmc, fleet):
    with pytest.raises(EnrollmentError) as refused:
        enroll(a_request(bmc, fleet), actor=Actor.system("tests"), reason="  ")
    assert refused.value.errors == {"reason": ["A reason is required."]}


def test_the_service_refuses_a_user_who_may_not_operate_nodes(viewer, bmc, fleet):
    with pytest.raises(TransitionForbidden, match="viewer may not enroll nodes"):
        enroll(a_request(bmc, fleet), actor=Actor(user=viewer), reason="trying")
    assert written() == (0, 0, 0)


def test_a_concurrent_enrollment_of_the_same_serial_is_a_conflict_and_leaves_nothing_half_made(bmc, fleet, monkeypatch):
    def rival_enrolls_meanwhile(req: EnrollmentRequest) -> dict[str, list[str]]:
        # The duplicate check passes; the rival's insert lands while our BMC is being read.
        if not Node.objects.filter(serial=req.serial).exists():
            NodeFactory(serial=req.serial, hostname="rival")
        return {}

    monkeypatch.setattr(enrollment, "_duplicates", rival_enrolls_meanwhile)
    with pytest.raises(EnrollmentConflict) as refused:
        enroll(a_request(bmc, fleet), actor=Actor.system("tests"), reason="racing")

    assert refused.value.errors == {"serial": ["'SN-E0001' or 'gpu-e01.dc1.example.com' was enrolled meanwhile."]}
    assert list(Node.objects.values_list("hostname", flat=True)) == ["rival"]
    assert not BmcEndpoint.objects.exists() and not NodeEvent.objects.exists()


def test_the_api_answers_a_lost_race_with_409(api_as, operator, bmc, fleet, monkeypatch):
    def rival_enrolls_meanwhile(req: EnrollmentRequest) -> dict[str, list[str]]:
        if not Node.objects.filter(serial=req.serial).exists():
            NodeFactory(serial=req.serial, hostname="rival")
        return {}

    monkeypatch.setattr(enrollment, "_duplicates", rival_enrolls_meanwhile)
    response = post(api_as(operator), a_node(bmc, fleet))
    assert response.status_code == 409
    assert written() == (1, 0, 0)
