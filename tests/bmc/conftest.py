"""Real BMC emulators for the bmc tests: sushy-tools (Redfish) and ipmi_sim (IPMI).

The emulators are session-scoped (with xdist, one set per worker); each test
that changes a system's power puts it back on first. Timings are shrunk through
settings so the whole module stays fast: a power state that does not arrive in
a few seconds never will.
"""

from __future__ import annotations

import importlib.util
import shutil

import factory
import pytest

from bmc.choices import BmcDriverKind
from bmc.models import BmcEndpoint
from sandbox.emulators.bmc import IpmiSimulator, RedfishEmulator
from tests.conftest import IN_CI
from tests.factories import NodeFactory

# Two systems on one emulator: gpu-node-01 for power and boot, gpu-node-02 for firmware.
REDFISH_SYSTEMS = [
    {"name": "gpu-node-01", "bios_version": "1.2.0", "memory_gib": 2048, "cpus": 112},
    {"name": "gpu-node-02", "bios_version": "2.4.0", "memory_gib": 1024, "cpus": 96},
]
IPMI_FRU = {
    "manufacturer": "Supermicro",
    "product": "SYS-821GE-TNHR",
    "serial": "S4R3N1AL",
    "part_number": "SYS-821GE-TNHR-01",
    "version": "1.01",
}


def _require(available: bool, what: str) -> None:
    if not available:
        if IN_CI:
            pytest.fail(f"{what} is required in CI (bin/test installs it)")
        pytest.skip(f"{what} is not installed")


class BmcEndpointFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = BmcEndpoint

    node = factory.SubFactory(NodeFactory)
    driver = BmcDriverKind.REDFISH
    address = "http://127.0.0.1:9"
    username = "admin"
    password = "not-the-real-one"


@pytest.fixture(autouse=True)
def fast_bmc_settings(settings):
    settings.NODEWARDEN_BMC_TIMEOUT = 2
    settings.NODEWARDEN_BMC_RETRIES = 2
    settings.NODEWARDEN_BMC_RETRY_BACKOFF_MS = 1
    settings.NODEWARDEN_BMC_POWER_TIMEOUT = 5
    settings.NODEWARDEN_BMC_POLL_INTERVAL = 0.02
    return settings


@pytest.fixture(scope="session")
def redfish_emulator():
    _require(importlib.util.find_spec("sushy_tools") is not None, "sushy-tools")
    with RedfishEmulator(REDFISH_SYSTEMS) as emulator:
        yield emulator


@pytest.fixture
def slow_redfish_emulator():
    """One system whose power changes show only after 5 s (the stock fake driver: 1-11 s)."""
    _require(importlib.util.find_spec("sushy_tools") is not None, "sushy-tools")
    with RedfishEmulator([{"name": "slow-node", "bios_version": "1.0.0"}], power_delay=5) as emulator:
        yield emulator


@pytest.fixture
def redfish_endpoint(db, redfish_emulator):
    """gpu-node-01's BMC, powered on."""
    redfish_emulator.set_power(True, 0)
    return BmcEndpointFactory(
        address=redfish_emulator.url,
        username=redfish_emulator.username,
        password=redfish_emulator.password,
        system_id=redfish_emulator.systems[0]["uuid"],
    )


@pytest.fixture
def firmware_endpoint(db, redfish_emulator):
    """gpu-node-02's BMC, addressed by its Redfish path."""
    return BmcEndpointFactory(
        address=redfish_emulator.url,
        username=redfish_emulator.username,
        password=redfish_emulator.password,
        system_id=redfish_emulator.system_path(1),
    )


@pytest.fixture(scope="session")
def ipmi_simulator():
    _require(
        shutil.which("ipmi_sim") is not None and shutil.which("ipmitool") is not None,
        "ipmi_sim (openipmi) and ipmitool",
    )
    with IpmiSimulator(fru=IPMI_FRU) as simulator:
        yield simulator


@pytest.fixture
def ipmi_endpoint(db, ipmi_simulator):
    """The simulator's BMC, powered on."""
    ipmi_simulator.set_power(True)
    return BmcEndpointFactory(
        driver=BmcDriverKind.IPMI,
        address=ipmi_simulator.address,
        username=ipmi_simulator.username,
        password=ipmi_simulator.password,
    )
