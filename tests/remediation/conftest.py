"""Fixtures for remediation: follow-ups and remediation tasks run inline (Celery eager), a real
Redfish emulator as every node's BMC, and re-validation shortened to a zero-length soak."""

from __future__ import annotations

import pytest

from nodes.choices import NodeState
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import BmcEndpointFactory, fast_bmc_settings  # noqa: F401  (autouse here too)
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory
from tests.validation.conftest import eager  # noqa: F401
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan


@pytest.fixture(scope="module")
def emulator():
    with RedfishEmulator([{"name": f"rem-{i:02d}", "bios_version": "2.1.7"} for i in range(12)]) as bmc:
        yield bmc


@pytest.fixture
def fleet(db, emulator):
    """Ten production nodes of one cluster (no workload scheduler), each with a BMC on the emulator;
    a remediated node re-validates with the soak alone, and the soak is zero."""
    profile = HardwareProfileFactory(name="rem-h100", firmware_baseline={})
    Day1Spec.objects.create(hardware_profile=profile, soak_seconds=0)
    RevalidationPlan.objects.create(reentry=Reentry.REMEDIATING, stages=[Stage.RELIABILITY])
    cluster = ClusterFactory(name="rem-cluster")
    nodes = []
    for i in range(10):
        node = NodeFactory(
            hostname=f"rem-{i:02d}", state=NodeState.PRODUCTION, cluster=cluster, hardware_profile=profile
        )
        emulator.set_power(True, i)
        BmcEndpointFactory(
            node=node,
            address=emulator.url,
            username=emulator.username,
            password=emulator.password,
            system_id=emulator.systems[i]["uuid"],
        )
        nodes.append(node)
    return nodes


@pytest.fixture
def settle(eager):  # noqa: F811
    """What Celery beat runs every minute for remediation: the reconciler, then the drain follower
    (``schedulers.reactions``), inline; ``settle(n)`` runs both n times."""
    from remediation import reconciler
    from schedulers.reactions import follow_drains

    def run(rounds: int = 1, now=None) -> None:
        for _ in range(rounds):
            with eager():
                reconciler.reconcile(now=now)
                follow_drains(now=now)

    return run
