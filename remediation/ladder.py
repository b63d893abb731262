"""What each rung does to the node, run from a Celery task (``remediation.tasks.run_step``).

- GPU reset: a ``reset_gpu`` agent command (``telemetry.commands``) for the GPU the finding names.
  The step then waits on the command, not on a worker: the agent's result completes it
  (``services.gpu_reset_answered``): a reset is the action done; a refusal (a process still holds
  the GPU), a failure, an expiry undelivered or a command left unanswered fails it, and the ladder
  climbs to a reboot; the deadline fails it too. A finding naming no GPU, or the rung turned off
  (``NODEWARDEN_GPU_RESET``), fails it at once and the ladder climbs.
- Reboot: a graceful restart through the BMC (in-band through the agent when it can).
- BMC power cycle: off, then on, through the BMC.
- Reimage: provisioning issues a re-install (a new boot generation, so a new cloud-init
  instance-id, and a new join token living as long as the step), then a one-time PXE boot
  override and a power cycle: the installer reinstalls the image and cloud-init runs the
  agent's join. The step then waits on the node, not on a worker: its action is done only when
  the reinstalled node's agent rejoined with that token (``provisioning.services.join`` ->
  ``services.reimage_rejoined``); a node that never rejoins fails it at its deadline (the
  reconciler), and the ladder climbs.
Reboot and power cycle wait until the BMC reports the node on again. Then every step verifies:
its success check is the re-validation that follows, and only that passes it. A BMC error fails
the step, and the ladder climbs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from provisioning import services as provisioning
from telemetry import commands
from telemetry.choices import CommandVerb

from .choices import Rung, Status, StepStatus
from .models import RemediationStep
from .services import ACTOR, action_done, step_failed

if TYPE_CHECKING:
    from bmc.models import BmcEndpoint


def run(step_id: int) -> str:
    """Carry out a step once; a step no longer running (finished, skipped, stopped) is left alone."""
    from bmc import client
    from bmc.drivers.base import BmcError, PowerAction

    step = (
        RemediationStep.objects.select_related("remediation__node", "remediation__finding").filter(pk=step_id).first()
    )
    if step is None or step.status != "running":
        return "nothing to do"
    if step.boot_generation is not None:
        return "waiting for the node to rejoin"  # a redelivery: the reimage is under way, never PXE twice
    if step.agent_command_id is not None:
        return "waiting for the agent"  # a redelivery: the reset is queued, never a second command
    # F(): two overlapping deliveries each count; last_activity tells the reconciler a worker has it.
    RemediationStep.objects.filter(pk=step.pk).update(attempts=F("attempts") + 1, last_activity=timezone.now())
    if step.deadline < timezone.now():
        step_failed(step, "timed out before it could run")
        return "timed out"
    node = step.remediation.node
    if step.rung == Rung.GPU_RESET:
        return _reset_gpu(step)
    endpoint: BmcEndpoint | None = getattr(node, "bmc", None)  # None: the node has no BMC row
    if endpoint is None:
        step_failed(step, "no BMC configured for this node")
        return "no BMC"
    if step.rung == Rung.REIMAGE:
        return _reimage(step, endpoint)
    try:
        if step.rung == Rung.REBOOT:
            client.power(endpoint, PowerAction.GRACEFUL_RESTART)
            detail = "graceful restart through the BMC; the node is on again"
        else:
            client.power(endpoint, PowerAction.POWER_CYCLE)
            detail = "power cycle through the BMC; the node is on again"
    except BmcError as exc:
        step_failed(step, f"BMC: {exc}")
        return "failed"
    action_done(step, detail)
    return "passed"


def _reset_gpu(step: RemediationStep) -> str:
    """Queue a reset of the finding's GPU for the node's agent; then wait for the command's end."""
    if not settings.NODEWARDEN_GPU_RESET:
        step_failed(step, "GPU reset turned off (NODEWARDEN_GPU_RESET)")
        return "turned off"
    rem = step.remediation
    finding = rem.finding
    gpu = finding.gpu_index if finding is not None else None
    if finding is None or gpu is None:
        step_failed(step, "no GPU named by the finding: nothing to reset")
        return "no GPU"
    now = timezone.now()
    # The agent has until the step's deadline to take it (at least the channel's minimum ttl).
    ttl = min(max(step.deadline - now, commands.MIN_TTL), commands.MAX_TTL)
    with transaction.atomic():
        # The row lock orders two overlapping deliveries: the second sees the command and issues none.
        if (
            not RemediationStep.objects.select_for_update()
            .filter(pk=step.pk, status=StepStatus.RUNNING, agent_command__isnull=True)
            .exists()
        ):
            return "waiting for the agent"
        command = commands.issue_command(
            rem.node_id,
            CommandVerb.RESET_GPU,
            args={"gpu": gpu},
            actor=ACTOR,
            reason=f"Remediation {rem.pk}: {finding.summary}"[:1000],
            ttl=ttl,
        )
        RemediationStep.objects.filter(pk=step.pk).update(
            agent_command=command,
            detail=f"reset_gpu #{command.pk} of GPU {gpu} queued for the node's agent; "
            f"waiting for its result (until {step.deadline:%H:%M:%S} UTC)",
        )
    return "waiting for the agent"


def _reimage(step: RemediationStep, endpoint: BmcEndpoint) -> str:
    """Re-install through provisioning, PXE once, power cycle; then wait for the node's join."""
    from django_fsm import TransitionNotAllowed

    from bmc import client
    from bmc.drivers.base import BmcError, PowerAction

    try:
        boot, token = provisioning.prepare_reimage(
            step.remediation.node_id,
            actor=ACTOR,
            reason=f"Reimage (remediation {step.remediation_id})",
            expires_at=step.deadline,
        )
    except TransitionNotAllowed as exc:  # the node left remediation meanwhile
        step_failed(step, f"could not prepare the reinstall: {exc}")
        return "failed"
    try:
        client.set_boot_once(endpoint, "pxe")
        client.power(endpoint, PowerAction.POWER_CYCLE)
    except BmcError as exc:
        step_failed(step, f"BMC: {exc}")
        return "failed"
    RemediationStep.objects.filter(pk=step.pk, status=StepStatus.RUNNING, boot_generation__isnull=True).update(
        boot_generation=boot.generation,
        detail=f"PXE boot once and a power cycle: the installer reinstalls boot generation {boot.generation}; "
        f"waiting for the node's agent to rejoin with join token {token.prefix}… "
        f"(until {step.deadline:%H:%M:%S} UTC)",
    )
    return "waiting for the node to rejoin"


def reimage_awaiting_join(node_id: int) -> RemediationStep | None:
    """The node's running reimage step, if its remediation runs it: the only one a join may complete."""
    return (
        RemediationStep.objects.filter(
            remediation__node_id=node_id,
            remediation__status=Status.RUNNING,
            rung=Rung.REIMAGE,
            status=StepStatus.RUNNING,
        )
        .order_by("-started")
        .first()
    )
