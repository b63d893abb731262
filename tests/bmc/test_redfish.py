"""bmc.client over Redfish, against the real sushy-tools emulator (sandbox.emulators.bmc)."""

from __future__ import annotations

import pytest

from bmc import client
from bmc.drivers.base import BmcAuthError, BmcError, BmcTimeout, BmcUnsupported, PowerAction, PowerState
from bmc.models import BmcEndpoint

from .conftest import BmcEndpointFactory

pytestmark = pytest.mark.django_db


def test_it_reads_the_inventory(redfish_endpoint, redfish_emulator):
    inventory = client.read_inventory(redfish_endpoint)
    assert inventory.manufacturer == "Sushy Emulator"
    assert inventory.model == "3500RX" and inventory.serial == "437XR1138R2"  # from the Chassis
    assert inventory.uuid == redfish_emulator.systems[0]["uuid"]
    assert inventory.bios_version == "1.2.0" and inventory.bmc_version == "1.00"
    assert inventory.processor_count == 112 and inventory.memory_gib == 2048.0
    assert inventory.health == "OK" and inventory.power_state is PowerState.ON
    assert inventory.firmware == {"bios": "1.2.0", "bmc": "1.00"}


def test_a_successful_call_records_the_contact_and_clears_the_last_error(redfish_endpoint):
    BmcEndpoint.objects.filter(pk=redfish_endpoint.pk).update(last_error="old trouble")
    client.read_inventory(redfish_endpoint)
    stored = BmcEndpoint.objects.get(pk=redfish_endpoint.pk)
    assert stored.last_contact_at is not None and stored.last_error == ""


def test_every_power_read_is_kept_on_the_endpoint_for_the_node_page(redfish_endpoint):
    client.power(redfish_endpoint, PowerAction.FORCE_OFF)
    stored = BmcEndpoint.objects.get(pk=redfish_endpoint.pk)
    assert stored.last_power_state == "off" and stored.last_power_state_at is not None
    client.power(redfish_endpoint, PowerAction.ON, wait=False)
    assert client.read_power_state(redfish_endpoint) is PowerState.ON
    assert BmcEndpoint.objects.get(pk=redfish_endpoint.pk).last_power_state == "on"


def test_it_powers_off_and_on_and_waits_for_each_state(redfish_endpoint, redfish_emulator):
    assert client.power(redfish_endpoint, PowerAction.FORCE_OFF) is PowerState.OFF
    assert redfish_emulator.system()["PowerState"] == "Off"
    assert client.power(redfish_endpoint, PowerAction.ON) is PowerState.ON
    assert redfish_emulator.system()["PowerState"] == "On"


def test_graceful_shutdown_ends_off(redfish_endpoint):
    assert client.power(redfish_endpoint, "graceful_shutdown") is PowerState.OFF


def test_force_restart_ends_on(redfish_endpoint):
    assert client.power(redfish_endpoint, PowerAction.FORCE_RESTART) is PowerState.ON


def test_power_cycle_falls_back_to_off_then_on_where_the_bmc_offers_no_power_cycle(redfish_endpoint):
    # sushy-tools offers no PowerCycle reset: the client turns it into ForceOff, wait, On.
    assert client.power(redfish_endpoint, PowerAction.POWER_CYCLE) is PowerState.ON


def test_without_wait_it_returns_the_state_right_after_the_request(redfish_endpoint):
    assert client.power(redfish_endpoint, PowerAction.FORCE_OFF, wait=False) in (PowerState.ON, PowerState.OFF)


def test_it_times_out_naming_the_state_it_saw_and_records_the_error(db, slow_redfish_emulator):
    endpoint = BmcEndpointFactory(
        address=slow_redfish_emulator.url,
        username=slow_redfish_emulator.username,
        password=slow_redfish_emulator.password,
    )  # blank system_id: the only one
    with pytest.raises(BmcTimeout) as caught:
        client.power(endpoint, PowerAction.FORCE_OFF, timeout=0.3)
    message = str(caught.value)
    assert "still reports power on" in message and "waiting for off" in message
    assert slow_redfish_emulator.url in message
    assert BmcEndpoint.objects.get(pk=endpoint.pk).last_error == message


def test_a_wrong_password_is_an_auth_error_that_says_so_without_the_password(redfish_endpoint):
    redfish_endpoint.password = "Wr0ng-Secret-Value"
    with pytest.raises(BmcAuthError) as caught:
        client.read_inventory(redfish_endpoint)
    message = str(caught.value)
    assert "refused user 'admin'" in message and "HTTP 401" in message and "Incorrect username or password" in message
    assert "Wr0ng-Secret-Value" not in message
    assert caught.value.attempts == 1  # a refusal is not retried
    assert BmcEndpoint.objects.get(pk=redfish_endpoint.pk).last_error == message


def test_it_boots_from_pxe_once(redfish_endpoint, redfish_emulator):
    client.set_boot_once(redfish_endpoint, "pxe")
    boot = redfish_emulator.system()["Boot"]
    # sushy-tools stores the target but always reports the override as Continuous.
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    client.set_boot_once(redfish_endpoint, "disk")
    assert redfish_emulator.system()["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_a_boot_target_the_bmc_does_not_offer_is_unsupported(redfish_endpoint):
    # The emulator allows Pxe, Cd and Hdd only; BIOS setup is not among them.
    with pytest.raises(BmcUnsupported, match="BiosSetup"):
        client.set_boot_once(redfish_endpoint, "bios")


def test_an_unknown_boot_target_is_refused_before_any_request(redfish_endpoint):
    with pytest.raises(BmcUnsupported, match="one of pxe, disk, cd, bios"):
        client.set_boot_once(redfish_endpoint, "floppy")


def test_simple_update_bumps_the_bios_and_the_firmware_inventory_shows_it(firmware_endpoint):
    before = client.firmware_inventory(firmware_endpoint)
    client.update_firmware(firmware_endpoint, "http://127.0.0.1:9/bios-2.5.0.bin")
    after = client.firmware_inventory(firmware_endpoint)
    major, minor, patch = before["bios"].split(".")
    assert after["bios"] == f"{major}.{int(minor) + 1}.{patch}"
    assert after["bmc"] == before["bmc"] == "1.00"


def test_a_bmc_with_several_systems_needs_a_system_id(redfish_endpoint):
    redfish_endpoint.system_id = ""
    with pytest.raises(BmcError, match="set the endpoint's system_id"):
        client.read_inventory(redfish_endpoint)


def test_the_event_log_is_empty_where_the_bmc_offers_no_log_services(redfish_endpoint):
    assert client.event_log(redfish_endpoint) == []
