"""A Celery worker killed in the middle of a power cycle does not strand the node in remediation:
the reconciler re-drives the step, and another worker brings the node back to production.

Nothing is simulated: the workers are ``celery worker`` subprocesses on the Redis broker and the
PostgreSQL test database, and the node's BMC is the Redfish emulator, slow enough to switch power
that the first worker is SIGKILLed while the node is still on its way off.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest

from health.services import raise_finding
from nodes.choices import NodeState
from nodes.models import NodeEvent
from remediation import reconciler
from remediation.choices import Rung, Status, StepStatus
from remediation.models import Remediation, RemediationStep
from sandbox.emulators.bmc import RedfishEmulator
from tests.infra.conftest import wait_until
from tests.remediation.realworker import broker_url, real_postgres, real_redis_url, start_worker  # noqa: F401

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

S = NodeState
POWER_DELAY = 3  # seconds before the emulated BMC shows a power change: the window the kill falls in
STALL_SECONDS = 10
TIMEOUT = 30
# The worker subprocess reads settings from its environment only (nodewarden/settings.py).
WORKER_ENV = {
    "NODEWARDEN_BMC_TIMEOUT": "5",
    "NODEWARDEN_BMC_RETRY_BACKOFF_MS": "100",
    "NODEWARDEN_BMC_POWER_TIMEOUT": "30",  # per wait: off, then on, each POWER_DELAY
    "NODEWARDEN_BMC_POLL_INTERVAL": "1",  # whole seconds (env_int)
}


@pytest.fixture(scope="module")
def emulator():
    """The fleet's BMCs (overriding the conftest's), each power change showing only after POWER_DELAY."""
    systems = [{"name": f"rem-{i:02d}", "bios_version": "2.1.7"} for i in range(12)]
    with RedfishEmulator(systems, power_delay=POWER_DELAY) as bmc:
        yield bmc


def resets(emulator: RedfishEmulator, index: int) -> int:
    """Power requests the BMC has accepted for a system (its HTTP log: sushy-tools keeps no other)."""
    assert emulator.workdir is not None
    log = (emulator.workdir / f"{emulator.name}.log").read_text(errors="replace")
    return log.count(f"POST {emulator.system_path(index)}/Actions/ComputerSystem.Reset ")


def what_happened(node, emulator: RedfishEmulator, workers: list) -> str:
    """Node, remediation, steps, BMC and every worker's log: what a failure message needs."""
    node.refresh_from_db()
    rem = Remediation.objects.filter(node=node).first()
    steps = list(RemediationStep.objects.filter(remediation__node=node).values("rung", "status", "attempts", "detail"))
    return (
        f"node {node.state}; remediation {rem and rem.status}: {rem and rem.decisions}\nsteps {steps}\n"
        f"BMC power {emulator.system(0)['PowerState']}, {resets(emulator, 0)} power requests in all\n"
        + "\n".join(f"--- worker {w.log_path.stem}: {w.explain()}" for w in workers)
    )


def test_a_worker_killed_mid_power_cycle_leaves_a_step_the_reconciler_re_drives(
    fleet,
    emulator,
    start_worker,  # noqa: F811  (the fixture imported above)
    settings,
):
    settings.NODEWARDEN_REMEDIATION_STALL_SECONDS = STALL_SECONDS
    node = fleet[0]
    resets_before = resets(emulator, 0)
    first = start_worker("first", **WORKER_ENV)
    workers = [first]
    explain = partial(what_happened, node, emulator, workers)
    raise_finding(
        node.pk,
        rule="xid",
        severity="catastrophic",
        xid=79,
        subject="xid:79",
        gpu_index=3,
        summary="XID 79: GPU has fallen off the bus",
        recommended_action="power_cycle",
    )

    # The first worker cordons the node and starts the power cycle: the BMC accepts "off" and takes
    # POWER_DELAY to get there, while the worker polls. It dies right there.
    wait_until(
        lambda: first.alive() and resets(emulator, 0) > resets_before,
        timeout=TIMEOUT,
        what="the first worker to ask the BMC to power the node off",
        explain=explain,
    )
    first.kill()

    step = RemediationStep.objects.select_related("remediation__node").get(remediation__node=node)
    assert (step.rung, step.status, step.attempts) == (Rung.POWER_CYCLE, StepStatus.RUNNING, 1), explain()
    assert (step.remediation.status, step.remediation.node.state) == (Status.RUNNING, S.REMEDIATING), explain()
    # Half-way through its cycle: off, and nobody left to turn it on again.
    wait_until(
        lambda: emulator.system(0)["PowerState"] == "Off",
        timeout=TIMEOUT,
        what="the BMC to finish powering the node off",
        explain=explain,
    )

    # A step younger than the stall delay may just be a slow BMC: it is left alone.
    assert reconciler.reconcile(now=step.started + timedelta(seconds=STALL_SECONDS - 1))["requeued"] == 0
    assert reconciler.reconcile(now=step.started + timedelta(seconds=STALL_SECONDS + 1)) == {
        "timed_out": 0,
        "requeued": 1,
        "drained": 0,
        "stood_down": 0,
        "superseded": 0,
        "admitted": 0,
        "restarted": 0,
        "errors": 0,
    }

    second = start_worker("second", **WORKER_ENV)
    workers.append(second)

    def back_in_production() -> bool:
        node.refresh_from_db()
        return (
            second.alive()
            and node.state == S.PRODUCTION
            and Remediation.objects.filter(node=node, status=Status.SUCCEEDED).exists()
        )

    wait_until(back_in_production, timeout=TIMEOUT, what="the second worker to bring the node back", explain=explain)

    step.refresh_from_db()
    assert (step.status, step.attempts) == (StepStatus.PASSED, 2), explain()
    assert "power cycle through the BMC" in step.detail
    assert emulator.system(0)["PowerState"] == "On"
    # The first worker got as far as "off"; the second ran the whole cycle again: off (a no-op), on.
    assert resets(emulator, 0) - resets_before == 3, explain()
    assert list(
        NodeEvent.objects.filter(node=node, kind="transition")
        .order_by("created", "id")
        .values_list("transition", flat=True)
    ) == [
        "cordon",
        "start_remediation",
        "revalidate",
        "pass_firmware",
        "pass_inventory_check",
        "pass_burn_in",
        "pass_fabric_check",
        "release_to_production",
    ]
    assert first.log().count("remediation.tasks.run_step[") == 1  # received, never finished
    assert second.log().count("remediation.tasks.run_step[") == 2  # received, succeeded
