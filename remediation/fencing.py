"""One declared branch of remediation: fence the GPU instead of draining the node.

A degraded finding that names one GPU of a production node where a customer job runs would drain
the whole node when the job ends. Instead, when ``NODEWARDEN_GPU_FENCING`` is on and the node's
scheduler fences that one GPU (``SchedulerAdapter.fence_gpus``), the GPU is fenced (actor
``system:remediation:fence``) and the node serves on with fewer GPUs; the remediation ends
FENCED. Anything else takes the usual road: a catastrophic finding still cordons at once, an idle
node drains (it costs no job) and gets its rung, a scheduler that cannot fence one GPU safely
drains it. The fence stays until an operator clears the GPU (a pass of re-validation clears
suspect GPUs, never fenced ones: a GPU that fell off the bus once passes a burn-in between faults).

The scheduler is asked before anything is written and outside any transaction (a slow scheduler
holds no row lock); ``nodes.services.fence_gpu`` then asks it again after commit, which is a no-op
for a GPU already fenced there.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings

from health.choices import Severity
from nodes.choices import GpuHealth, NodeState
from nodes.models import GPU, Node
from nodes.services import Actor
from schedulers import base
from schedulers.base import SchedulerError

from . import safety
from .choices import Urgency
from .models import Remediation

log = logging.getLogger(__name__)
FENCE_ACTOR = Actor.system("remediation:fence")


def fence_reason(rem: Remediation) -> str:
    """The fence's reason: the remediation and the finding that called for it."""
    finding = rem.finding
    assert finding is not None  # noqa: S101 - fence_candidate only answers for a finding
    return f"Remediation {rem.pk}: finding {finding.pk} ({finding.rule}): {finding.summary}"


def fence_candidate(rem: Remediation, node: Node, now: datetime) -> GPU | None:
    """The GPU to fence instead of draining the node, once the scheduler has fenced it; else None."""
    finding = rem.finding
    if not settings.NODEWARDEN_GPU_FENCING or finding is None or finding.gpu_index is None:
        return None
    if finding.severity != Severity.DEGRADED or rem.urgency != Urgency.WHEN_IDLE or node.state != NodeState.PRODUCTION:
        return None
    gpu = GPU.objects.filter(node=node, index=finding.gpu_index).first()
    if gpu is None or safety.block_reason(node, taking_out=False, now=now):
        return None  # a GPU the inventory lacks, or a hold or breaker: the usual road queues it
    adapter = base.adapter_for(node.cluster)  # looked up late: tests stand a scheduler in
    try:
        if not adapter.is_running_work(node):
            return None  # an idle node drains at once and gets its rung: nothing to spare
        if gpu.health != GpuHealth.FENCED and not adapter.fence_gpus(node, [gpu.index], reason=fence_reason(rem)):
            return None
    except SchedulerError as exc:
        log.info("node %s: no GPU fence (%s); draining as usual", node.pk, exc)
        return None
    return gpu
