"""bmc.client over IPMI (ipmitool lanplus), against the real OpenIPMI ipmi_sim (sandbox.emulators.bmc)."""

from __future__ import annotations

import pytest

from bmc import client
from bmc.drivers.base import BmcAuthError, BmcUnreachable, BmcUnsupported, PowerAction, PowerState
from bmc.drivers.ipmi import IpmiDriver, split_address
from bmc.models import BmcEndpoint
from sandbox.emulators.bmc import IpmiSimulator, free_port

from .conftest import IPMI_FRU

pytestmark = pytest.mark.django_db


def test_it_reads_the_inventory_from_fru_and_mc_info(ipmi_endpoint):
    inventory = client.read_inventory(ipmi_endpoint)
    assert inventory.manufacturer == IPMI_FRU["manufacturer"]
    assert inventory.model == IPMI_FRU["product"] and inventory.serial == IPMI_FRU["serial"]
    assert inventory.bmc_version == "9.08" and inventory.firmware == {"bmc": "9.08"}
    assert inventory.uuid and len(inventory.uuid) == 36
    assert inventory.power_state is PowerState.ON
    # IPMI has no standard answer for these: the driver says None rather than guess.
    assert inventory.bios_version is None and inventory.processor_count is None
    assert inventory.memory_gib is None and inventory.health is None


def test_a_bmc_without_fru_data_reports_no_manufacturer_model_or_serial(db):
    with IpmiSimulator() as bare:
        endpoint = BmcEndpoint(driver="ipmi", address=bare.address, username=bare.username, password=bare.password)
        inventory = client.driver_for(endpoint).inventory()
    assert (inventory.manufacturer, inventory.model, inventory.serial) == (None, None, None)
    assert inventory.bmc_version == "9.08"


def test_it_powers_off_and_on_and_waits_for_each_state(ipmi_endpoint, ipmi_simulator):
    assert client.power(ipmi_endpoint, PowerAction.FORCE_OFF) is PowerState.OFF
    assert client.power(ipmi_endpoint, PowerAction.ON) is PowerState.ON
    assert ipmi_simulator.power_log[-2:] == ["set power 0", "set power 1"]


def test_graceful_shutdown_is_a_soft_off(ipmi_endpoint, ipmi_simulator):
    assert client.power(ipmi_endpoint, PowerAction.GRACEFUL_SHUTDOWN) is PowerState.OFF
    assert ipmi_simulator.power_log[-1] == "set shutdown 1"


def test_force_restart_is_a_chassis_reset(ipmi_endpoint, ipmi_simulator):
    assert client.power(ipmi_endpoint, PowerAction.FORCE_RESTART) is PowerState.ON
    assert ipmi_simulator.power_log[-1] == "set reset 1"


def test_power_cycle_goes_off_and_comes_back_on(ipmi_endpoint, ipmi_simulator):
    # ipmi_sim powers off at once and back on a second later by itself.
    assert client.power(ipmi_endpoint, PowerAction.POWER_CYCLE) is PowerState.ON
    assert ipmi_simulator.power_log[-2:] == ["set power 0", "set power 1"]


def test_graceful_restart_is_unsupported_over_ipmi(ipmi_endpoint):
    with pytest.raises(BmcUnsupported, match="no graceful restart"):
        client.power(ipmi_endpoint, PowerAction.GRACEFUL_RESTART)


def test_it_boots_from_pxe_once(ipmi_endpoint, ipmi_simulator):
    client.set_boot_once(ipmi_endpoint, "pxe")
    assert ipmi_simulator.power_log[-1] == "set boot pxe"
    client.set_boot_once(ipmi_endpoint, "cd")
    assert ipmi_simulator.power_log[-1] == "set boot cdrom"


def test_it_reads_the_sel(ipmi_endpoint):
    [entry] = client.event_log(ipmi_endpoint)
    assert entry["id"] == 1 and entry["sensor"] == "Temperature #0x30" and entry["record_type"] == "02"
    assert entry["event"] == "Upper Critical going high" and entry["state"] == "Asserted"


def test_firmware_update_is_unsupported_over_ipmi(ipmi_endpoint):
    assert client.firmware_inventory(ipmi_endpoint) == {"bmc": "9.08"}
    with pytest.raises(BmcUnsupported, match="no standard firmware update"):
        client.update_firmware(ipmi_endpoint, "http://127.0.0.1:9/bmc.bin")


def test_a_wrong_password_is_an_auth_error_without_the_password(ipmi_endpoint):
    ipmi_endpoint.password = "Wr0ngIpmiPass"
    with pytest.raises(BmcAuthError) as caught:
        client.power(ipmi_endpoint, PowerAction.ON)
    message = str(caught.value)
    assert "refused user 'admin'" in message and "RAKP" in message and "Wr0ngIpmiPass" not in message
    assert caught.value.attempts == 1
    assert BmcEndpoint.objects.get(pk=ipmi_endpoint.pk).last_error == message


def test_no_answer_is_unreachable(db, settings):
    settings.NODEWARDEN_BMC_RETRIES = 0  # ipmitool waits ~2 s per try for a UDP answer that never comes
    endpoint = BmcEndpoint(driver="ipmi", address=f"127.0.0.1:{free_port()}", username="admin", password="x")
    with pytest.raises(BmcUnreachable, match="no IPMI session"):
        client.driver_for(endpoint, timeout=1).power_state()


def test_the_password_goes_through_the_environment_never_the_command_line():
    driver = IpmiDriver("10.0.0.5", username="admin", password="S3cretPass")
    command = driver._command(("chassis", "power", "status"))
    assert "-E" in command and "S3cretPass" not in " ".join(command) and "-P" not in command
    assert "S3cretPass" not in repr(driver)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.5", ("10.0.0.5", 623)),
        ("10.0.0.5:6230", ("10.0.0.5", 6230)),
        ("bmc-01.example.net", ("bmc-01.example.net", 623)),
        ("[fd00::5]:624", ("fd00::5", 624)),
        ("fd00::5", ("fd00::5", 623)),
    ],
)
def test_addresses_may_carry_a_port(address, expected):
    assert split_address(address) == expected
