"""The GPU reset rung through the agent command channel: the step issues reset_gpu for the finding's
GPU, waits, and the command's end completes it (re-validation), or fails it and the ladder climbs.

Real here: the command channel's services (the agent's poll and its result, as the API calls them),
Celery follow-ups and remediation tasks (eager, inline), the Redfish emulator as the BMC of the
rungs above. The agent's side (NVML, nvidia-smi) is driven for real in tests/e2e/test_gpu_reset.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from health.services import raise_finding
from nodes.choices import NodeState
from remediation import ladder
from remediation.choices import Rung, Status, StepStatus
from remediation.models import Remediation
from telemetry.commands import CommandResult, deliver_commands, expire_commands, record_command_result
from telemetry.models import AgentCommand

pytestmark = pytest.mark.django_db
S = NodeState


def xid48(node, eager, gpu_index: int | None = 2) -> Remediation:
    """A double-bit ECC error (XID 48, catastrophic, recovery: reset the GPU) on GPU ``gpu_index``."""
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity="catastrophic",
            xid=48,
            subject="xid:48",
            gpu_index=gpu_index,
            summary="XID 48 ECC_DBE: double-bit ECC error",
            recommended_action="reset_gpu",
        )
    node.refresh_from_db()
    return Remediation.objects.get(node=node)


def answer(node, eager, status: str, summary: str) -> AgentCommand:
    """The agent's side, through the channel's services: it polls, takes the command, reports."""
    (command,) = deliver_commands(node.pk)
    with eager():
        record_command_result(command.pk, node.pk, result=CommandResult(status=status, summary=summary))
    return command


def steps(rem: Remediation) -> dict[str, object]:
    return {s.rung: s for s in rem.steps.all()}


def test_the_rung_resets_the_findings_gpu_through_the_agent_and_revalidates(fleet, eager):
    node = fleet[0]
    rem = xid48(node, eager)
    step = rem.steps.get()
    command = AgentCommand.objects.get(node=node)
    assert step.status == StepStatus.RUNNING and step.agent_command_id == command.pk, step.detail
    assert (command.verb, command.args, command.issued_by_name) == ("reset_gpu", {"gpu": 2}, "system:remediation")
    assert command.reason.startswith(f"Remediation {rem.pk}: XID 48")
    # The agent has until the step's deadline to take it (the channel stamps its own clock: within a second).
    assert abs(command.expires_at - step.deadline) < timedelta(seconds=1)
    assert node.state == S.REMEDIATING and rem.status == Status.RUNNING

    answer(node, eager, "succeeded", "GPU 2 reset")

    rem.refresh_from_db()
    node.refresh_from_db()
    step.refresh_from_db()
    assert step.status == StepStatus.PASSED and f"reset_gpu #{command.pk} (GPU 2) succeeded" in step.detail
    assert rem.status == Status.SUCCEEDED and rem.rung == Rung.GPU_RESET and node.state == S.PRODUCTION


def test_a_busy_gpu_fails_the_step_with_the_agents_words_and_the_ladder_climbs_to_reboot(fleet, eager):
    node = fleet[1]
    rem = xid48(node, eager)

    answer(node, eager, "failed", "busy: 1 processes")

    rem.refresh_from_db()
    rung = steps(rem)
    assert rung[Rung.GPU_RESET].status == StepStatus.FAILED
    assert "failed: busy: 1 processes" in rung[Rung.GPU_RESET].detail
    assert rung[Rung.REBOOT].status == StepStatus.PASSED and rem.status == Status.SUCCEEDED
    assert any("gpu reset failed" in d["what"] and d["what"].endswith("climbing to reboot") for d in rem.decisions), (
        rem.decisions
    )


def test_a_reset_delivered_but_never_answered_fails_at_the_deadline_and_climbs(fleet, eager, settle):
    node = fleet[2]
    rem = xid48(node, eager)
    step = rem.steps.get()
    (command,) = deliver_commands(node.pk)  # the agent took it, then died mid-reset

    settle(now=step.deadline - timedelta(seconds=1))
    step.refresh_from_db()
    assert step.status == StepStatus.RUNNING and step.attempts == 1  # waits on the agent: never re-queued
    settle(now=step.deadline + timedelta(seconds=1))

    rem.refresh_from_db()
    rung = steps(rem)
    assert rung[Rung.GPU_RESET].status == StepStatus.FAILED and "timed out" in rung[Rung.GPU_RESET].detail
    assert rung[Rung.REBOOT].status == StepStatus.PASSED and rem.status == Status.SUCCEEDED
    assert AgentCommand.objects.filter(pk=command.pk, status="delivered").exists()
    # The channel ends the command too, its ttl after delivery; the step has moved on and stays.
    with eager():
        assert expire_commands(command.answer_by) == 1
    command.refresh_from_db()
    assert command.status == "failed" and command.summary.startswith("Unanswered")
    assert Remediation.objects.get(pk=rem.pk).status == Status.SUCCEEDED


def test_a_reset_the_agent_never_takes_expires_and_the_ladder_climbs(fleet, eager):
    node = fleet[3]
    rem = xid48(node, eager)
    command = AgentCommand.objects.get(node=node)

    with eager():
        assert expire_commands(command.expires_at) == 1

    rem.refresh_from_db()
    rung = steps(rem)
    assert rung[Rung.GPU_RESET].status == StepStatus.FAILED and "expired" in rung[Rung.GPU_RESET].detail
    assert rung[Rung.REBOOT].status == StepStatus.PASSED


def test_turned_off_the_rung_fails_at_once_and_climbs(fleet, eager, settings):
    settings.NODEWARDEN_GPU_RESET = False
    rem = xid48(fleet[4], eager)

    rung = steps(rem)
    assert rung[Rung.GPU_RESET].detail == "GPU reset turned off (NODEWARDEN_GPU_RESET)"
    assert rung[Rung.REBOOT].status == StepStatus.PASSED and rem.status == Status.SUCCEEDED
    assert not AgentCommand.objects.exists()


def test_a_finding_naming_no_gpu_skips_the_rung_and_climbs(fleet, eager):
    rem = xid48(fleet[5], eager, gpu_index=None)

    rung = steps(rem)
    assert rung[Rung.GPU_RESET].status == StepStatus.FAILED and "no GPU named" in rung[Rung.GPU_RESET].detail
    assert rung[Rung.REBOOT].status == StepStatus.PASSED
    assert not AgentCommand.objects.exists()


def test_a_redelivered_task_issues_no_second_command(fleet, eager, settle):
    node = fleet[6]
    rem = xid48(node, eager)
    step = rem.steps.get()

    assert ladder.run(step.pk) == "waiting for the agent"  # the broker delivers run_step again
    settle(now=step.started + timedelta(minutes=4))  # the reconciler does not re-queue it either

    assert AgentCommand.objects.filter(node=node).count() == 1
    answer(node, eager, "succeeded", "GPU 2 reset")
    with eager():  # a late duplicate of the follow-up changes nothing
        from remediation.services import gpu_reset_answered

        assert gpu_reset_answered(step.agent_command_id) is None
    assert Remediation.objects.get(pk=rem.pk).status == Status.SUCCEEDED


def test_an_operators_reset_of_the_same_gpu_does_not_complete_the_step(fleet, eager, operator):
    from nodes.services import Actor
    from telemetry.commands import issue_command

    node = fleet[7]
    rem = xid48(node, eager)
    own = AgentCommand.objects.get(node=node)
    other = issue_command(node.pk, "reset_gpu", args={"gpu": 2}, actor=Actor(user=operator), reason="by hand")
    taken = deliver_commands(node.pk)
    assert [c.pk for c in taken] == [own.pk, other.pk]
    with eager():
        record_command_result(other.pk, node.pk, result=CommandResult(status="succeeded", summary="GPU 2 reset"))

    step = rem.steps.get()
    assert step.status == StepStatus.RUNNING and step.agent_command_id == own.pk
