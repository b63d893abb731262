"""The GPU reset rung end to end: an XID on one GPU -> remediation -> reset_gpu through the real
agent -> its result -> the step -> re-validation; or the ladder climbs to a reboot.

Real here: the portal (live server), Celery follow-ups and remediation tasks (eager, inline), the
real agent package (its collectors, kernel-log parser, HTTP client, command poll and ``execute``),
the sushy-tools Redfish emulator as the node's BMC (the reboot rung). Stood in, as in
test_agent_commands: NVML is the FakeNvml of a real H100 (its process list says whether the GPU is
busy) and the command runner a recorder, a mock: a test may not reset this machine's GPUs.
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

import pytest

from health.models import Finding
from nodes.choices import NodeState
from remediation import reconciler
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationPolicy
from sandbox.emulators.bmc import RedfishEmulator
from telemetry.models import AgentCommand
from tests.bmc.conftest import BmcEndpointFactory
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan

from .conftest import HOSTNAME
from .test_day0_to_production import eager_followups  # noqa: F401 (autouse)

pytestmark = pytest.mark.django_db(transaction=True)
S = NodeState
GPU = 2  # the fake NVML's GPU 2 sits at 00000000:52:00.0
# A contained ECC error on GPU 2, as the R550 driver prints it: the application restarts, the GPU
# is to be reset (the XID catalog's recommended action for 94: reset_gpu).
XID_94_LINE = (
    "NVRM: Xid (PCI:0000:52:00): 94, pid=18231, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No"
)


class Runner:
    """Records each argv the agent would run and answers as nvidia-smi does (exit 0)."""

    def __init__(self, crash: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.crash = crash

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if self.crash:  # the agent dies mid-reset, before it wrote its result
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(argv, 0, "GPU 00000000:52:00.0 was successfully reset.\n", "")


@pytest.fixture
def bmc():
    with RedfishEmulator([{"name": HOSTNAME, "bios_version": "2.1.7"}]) as emulator:
        yield emulator


@pytest.fixture
def node(bmc, settings):
    """A production node of a cluster of ten, its BMC on the emulator, re-validated by a zero soak;
    a policy acts now on XID 94 (a warning: by default only watched) and leaves the first rung to
    the finding's recommended action."""
    settings.NODEWARDEN_BMC_TIMEOUT, settings.NODEWARDEN_BMC_RETRIES = 2, 2
    settings.NODEWARDEN_BMC_RETRY_BACKOFF_MS = 1
    profile = HardwareProfileFactory(name="reset-h100", firmware_baseline={})
    Day1Spec.objects.create(hardware_profile=profile, soak_seconds=0)
    RevalidationPlan.objects.create(reentry=Reentry.REMEDIATING, stages=[Stage.RELIABILITY])
    cluster = ClusterFactory(name="reset")
    node = NodeFactory(hostname=HOSTNAME, state=S.PRODUCTION, cluster=cluster, hardware_profile=profile)
    NodeFactory.create_batch(9, state=S.PRODUCTION, cluster=cluster)  # one node of ten: within the blast radius
    bmc.set_power(True)
    BmcEndpointFactory(
        node=node, address=bmc.url, username=bmc.username, password=bmc.password, system_id=bmc.systems[0]["uuid"]
    )
    RemediationPolicy.objects.create(name="XID 94: act now", match_xid=94, urgency=Urgency.NOW)
    return node


def xid94(agent, hardware, node) -> Remediation:
    """The agent reports the XID 94 line; the portal decides and starts the rung, inline."""
    agent.cycle()  # healthy: the portal learns which GPU sits at 0000:52:00
    hardware.kernel_log(XID_94_LINE)
    agent.cycle()
    node.refresh_from_db()
    return Remediation.objects.get(node=node)


def test_an_xid_94_resets_that_gpu_through_the_agent_and_the_node_returns_after_revalidation(
    live_server, node, agent_token, hardware, capsys
):
    from nodewarden_agent.commands import CommandEnv

    agent = hardware.agent(live_server.url, agent_token)
    runner = Runner()
    agent.command_env = CommandEnv(runner=runner, nvml=lambda: hardware.nvml, ib_root=hardware.ib_root)
    started = time.monotonic()

    rem = xid94(agent, hardware, node)

    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.xid, finding.gpu_index, finding.recommended_action) == (94, GPU, "reset_gpu")
    assert rem.rung == Rung.GPU_RESET and rem.status == Status.RUNNING and node.state == S.REMEDIATING, rem.decisions
    step = rem.steps.get()
    command = AgentCommand.objects.get(node=node)
    assert step.agent_command_id == command.pk and step.status == StepStatus.RUNNING
    assert (command.verb, command.args, command.status) == ("reset_gpu", {"gpu": GPU}, "queued")
    assert command.issued_by_name == "system:remediation" and command.reason.startswith(f"Remediation {rem.pk}")

    assert agent.poll_commands() == 1  # the agent takes it, resets GPU 2 (no process on it), reports
    elapsed = time.monotonic() - started

    assert runner.calls == [["nvidia-smi", "--gpu-reset", "-i", str(GPU)]]
    command.refresh_from_db()
    step.refresh_from_db()
    rem.refresh_from_db()
    node.refresh_from_db()
    assert (command.status, command.summary) == ("succeeded", f"GPU {GPU} reset")
    assert step.status == StepStatus.PASSED and step.acted_at is not None, step.detail
    assert rem.status == Status.SUCCEEDED and node.state == S.PRODUCTION, rem.decisions
    assert [s.rung for s in rem.steps.all()] == [Rung.GPU_RESET]  # no reboot
    assert agent.poll_commands() == 0
    with capsys.disabled():
        print(
            f"\nGPU reset rung: finding -> reset done {(step.acted_at - finding.created).total_seconds():.2f} s, "
            f"-> back in production {(rem.finished - finding.created).total_seconds():.2f} s; "
            f"agent report to production (wall) {elapsed:.2f} s"
        )


def test_a_busy_gpu_is_not_reset_and_the_ladder_climbs_to_a_reboot_through_the_bmc(
    live_server, node, agent_token, hardware
):
    from nodewarden_agent.commands import CommandEnv

    agent = hardware.agent(live_server.url, agent_token)
    runner = Runner()
    agent.command_env = CommandEnv(runner=runner, nvml=lambda: hardware.nvml, ib_root=hardware.ib_root)
    rem = xid94(agent, hardware, node)
    hardware.nvml.data["gpus"][GPU]["pids"] = [31337]  # a process still holds GPU 2

    assert agent.poll_commands() == 1

    assert runner.calls == []  # the agent refused: nothing was run
    rem.refresh_from_db()
    node.refresh_from_db()
    steps = {s.rung: s for s in rem.steps.all()}
    assert steps[Rung.GPU_RESET].status == StepStatus.FAILED
    assert "failed: busy: 1 processes" in steps[Rung.GPU_RESET].detail
    assert steps[Rung.REBOOT].status == StepStatus.PASSED and "graceful restart" in steps[Rung.REBOOT].detail
    assert rem.status == Status.SUCCEEDED and node.state == S.PRODUCTION, rem.decisions


def test_an_agent_that_dies_mid_reset_fails_the_step_at_its_deadline_and_the_ladder_climbs(
    live_server, node, agent_token, hardware
):
    from nodewarden_agent.commands import CommandEnv

    agent = hardware.agent(live_server.url, agent_token)
    agent.command_env = CommandEnv(runner=Runner(crash=True), nvml=lambda: hardware.nvml, ib_root=hardware.ib_root)
    rem = xid94(agent, hardware, node)
    step = rem.steps.get()

    with pytest.raises(KeyboardInterrupt):
        agent.poll_commands()  # took the command, died before it wrote or sent a result

    command = AgentCommand.objects.get(node=node)
    assert command.status == "delivered"
    waiting = reconciler.reconcile(now=step.deadline - timedelta(seconds=1))
    assert (waiting["timed_out"], waiting["requeued"]) == (0, 0)  # waits on the agent: no second command
    assert reconciler.reconcile(now=step.deadline + timedelta(seconds=1))["timed_out"] == 1

    rem.refresh_from_db()
    node.refresh_from_db()
    steps = {s.rung: s for s in rem.steps.all()}
    assert steps[Rung.GPU_RESET].status == StepStatus.FAILED and "timed out" in steps[Rung.GPU_RESET].detail
    assert steps[Rung.REBOOT].status == StepStatus.PASSED
    assert rem.status == Status.SUCCEEDED and node.state == S.PRODUCTION, rem.decisions
    assert AgentCommand.objects.filter(node=node).count() == 1
