"""What each rung does to the node, run from a Celery task (``remediation.tasks.run_step``).

- GPU reset: needs the node agent's command channel, which does not exist yet: the step
  fails at once with that reason and the ladder climbs (nothing is pretended).
- Reboot: a graceful restart through the BMC (in-band through the agent when it can).
- BMC power cycle: off, then on, through the BMC.
- Reimage: a one-time PXE boot override, then a power cycle: the installer reinstalls the
  image (the node's boot config decides which).
Each waits until the BMC reports the node on again; the step then verifies: its success check is
the re-validation that follows, and only that passes it. A BMC error fails the step, and the
ladder climbs.
"""
from __future__ import annotations

from django.db.models import F
from django.utils import timezone

from .choices import Rung
from .models import RemediationStep
from .services import action_done, step_failed


def run(step_id: int) -> str:
    """Carry out a step once; a step no longer running (finished, skipped, stopped) is left alone."""
    from bmc import client
    from bmc.drivers.base import BmcError, PowerAction

    step = RemediationStep.objects.select_related("remediation__node").filter(pk=step_id).first()
    if step is None or step.status != "running":
        return "nothing to do"
    # F(): two overlapping deliveries each count; last_activity tells the reconciler a worker has it.
    RemediationStep.objects.filter(pk=step.pk).update(attempts=F("attempts") + 1, last_activity=timezone.now())
    if step.deadline < timezone.now():
        step_failed(step, "timed out before it could run")
        return "timed out"
    node = step.remediation.node
    if step.rung == Rung.GPU_RESET:
        step_failed(step, "GPU reset needs the node agent's command channel, which this version does not have")
        return "not available"
    endpoint = getattr(node, "bmc", None)
    if endpoint is None:
        step_failed(step, "no BMC configured for this node")
        return "no BMC"
    try:
        if step.rung == Rung.REBOOT:
            client.power(endpoint, PowerAction.GRACEFUL_RESTART)
            detail = "graceful restart through the BMC; the node is on again"
        elif step.rung == Rung.POWER_CYCLE:
            client.power(endpoint, PowerAction.POWER_CYCLE)
            detail = "power cycle through the BMC; the node is on again"
        else:
            client.set_boot_once(endpoint, "pxe")
            client.power(endpoint, PowerAction.POWER_CYCLE)
            detail = "PXE boot once and a power cycle: the installer reimages the node"
    except BmcError as exc:
        step_failed(step, f"BMC: {exc}")
        return "failed"
    action_done(step, detail)
    return "passed"
