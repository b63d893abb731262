"""The firmware stage against the real Redfish emulator (sushy-tools, started by the test):
versions read from the BMC, updated through UpdateService SimpleUpdate, the node restarted
through the BMC, versions read again; what is still behind fails with the exact difference.

The emulator's SimpleUpdate bumps the BIOS minor version (2.0.7 -> 2.1.7): that stands in
for flashing the image the profile names. Its manager reports firmware "1.00"."""

from __future__ import annotations

import pytest

from nodes import services as node_services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import NodeEvent
from nodes.services import Actor
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import BmcEndpointFactory, fast_bmc_settings  # noqa: F401  (autouse here too)
from tests.factories import HardwareProfileFactory

from .conftest import idle_report, send

pytestmark = pytest.mark.django_db
IMAGE = "http://repo.example/bios-2.1.7.bin"


@pytest.fixture
def emulator():
    systems = [
        {"name": "fw-current", "bios_version": "2.1.7"},
        {"name": "fw-behind", "bios_version": "2.0.7"},
        {"name": "fw-ancient", "bios_version": "1.9.9"},
    ]
    with RedfishEmulator(systems) as bmc:
        yield bmc


def node_on(emulator, index, node_in, baseline):
    profile = HardwareProfileFactory(name=f"profile-{index}-{len(baseline)}", firmware_baseline=baseline)
    node = node_in(NodeState.ONBOARD, hardware_profile=profile)
    BmcEndpointFactory(
        node=node,
        address=emulator.url,
        username=emulator.username,
        password=emulator.password,
        system_id=emulator.systems[index]["uuid"],
    )
    return node


def validate(node, eager):
    with eager():
        node_services.start_validation(node.pk, actor=Actor.system("tests"), reason="onboard")
    node.refresh_from_db()
    return node.runs.get(kind=RunKind.STAGE_FIRMWARE)


def test_firmware_at_baseline_passes_and_records_every_version(emulator, node_in, eager):
    node = node_on(emulator, 0, node_in, {"bios": "2.1.7", "bmc": "1.00", "gpu_vbios": "96.00.99.00.01"})
    send(node, idle_report(node))  # the agent's VBIOS and driver versions count too
    run = validate(node, eager)
    assert run.status == RunStatus.PASSED, run.summary
    assert node.state == NodeState.INVENTORY_CHECK
    seen = run.details["evidence"]["after"]
    assert seen["bios"] == "2.1.7" and seen["gpu_vbios"] == "96.00.99.00.01" and "driver" in seen
    assert "3 component(s) at or above baseline" in run.summary


def test_firmware_behind_with_an_image_is_updated_through_the_bmc_and_passes(emulator, node_in, eager):
    node = node_on(emulator, 1, node_in, {"bios": {"version": "2.1.7", "image": IMAGE}})
    run = validate(node, eager)
    assert run.status == RunStatus.PASSED, run.summary
    evidence = run.details["evidence"]
    assert evidence["before"]["bios"] == "2.0.7" and evidence["after"]["bios"] == "2.1.7"
    assert evidence["updated"] == ["bios"] and run.summary.startswith("Updated bios")
    assert emulator.system(1)["BiosVersion"] == "2.1.7" and emulator.system(1)["PowerState"] == "On"


def test_firmware_still_behind_after_the_update_sends_the_node_to_triage(emulator, node_in, eager):
    node = node_on(emulator, 2, node_in, {"bios": {"version": "2.1.7", "image": IMAGE}})
    run = validate(node, eager)
    assert run.status == RunStatus.FAILED and node.state == NodeState.TRIAGE
    reason = NodeEvent.objects.filter(node=node, transition="fail_validation").get().reason
    assert "Firmware behind baseline after updating bios: bios 1.10.9 (baseline 2.1.7)" in reason


def test_firmware_behind_without_an_image_fails_and_says_so(emulator, node_in, eager):
    node = node_on(emulator, 1, node_in, {"bios": "2.1.7", "bmc": "13.3.4"})
    run = validate(node, eager)
    assert run.status == RunStatus.FAILED
    assert "bmc 1.00 (baseline 13.3.4)" in run.summary and "no update image configured for bios, bmc" in run.summary


def test_an_unreachable_bmc_fails_the_stage_with_the_bmc_error(node_in, eager):
    node = node_in(NodeState.ONBOARD, hardware_profile=HardwareProfileFactory(name="unreachable"))
    BmcEndpointFactory(node=node, address="http://127.0.0.1:9")  # nothing listens on port 9
    run = validate(node, eager)
    assert run.status == RunStatus.FAILED and node.state == NodeState.TRIAGE
    assert "BMC error" in run.summary
    node.bmc.refresh_from_db()
    assert node.bmc.last_error  # recorded on the endpoint too
