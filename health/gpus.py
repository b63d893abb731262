"""What a finding does to the GPU it names: it makes that GPU suspect (``nodes.services``).

Registered in ``HealthConfig.ready`` as a follow-up of every new finding (``health.followups``),
so it runs once the finding has committed, in its own transaction. A finding that names no GPU,
an info finding (recorded only), and an XID that is the application's doing (the GPU is fine)
leave the GPU alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nodes.models import GPU
from nodes.services import Actor, mark_gpu_suspect

from .choices import Severity
from .models import Finding
from .xid import APPLICATION_XIDS

log = logging.getLogger(__name__)
HEALTH = Actor.system("health")


def casts_suspicion(finding: Finding) -> bool:
    """Whether this finding says something about the GPU it names."""
    if finding.gpu_index is None or finding.node_id is None or finding.shadow:
        return False
    if finding.severity == Severity.INFO:
        return False
    return finding.xid not in APPLICATION_XIDS


def suspect_named_gpu(finding_ids: Sequence[int], *, warn_unknown: bool = True) -> None:
    """The GPUs new findings name become suspect (idempotent: one history row per suspicion).
    One query reads the findings; each GPU named is marked once, by its first finding.
    ``warn_unknown``: log a GPU the inventory lacks (off for a second caller of the same findings)."""
    findings = (
        Finding.objects.only("id", "node_id", "gpu_index", "severity", "xid", "shadow", "summary", "rule")
        .filter(pk__in=list(finding_ids))
        .order_by("pk")
    )
    seen: set[tuple[int, int]] = set()
    for finding in findings:
        if not casts_suspicion(finding):
            continue
        assert finding.node_id is not None and finding.gpu_index is not None  # noqa: S101 - checked above, for mypy
        if (finding.node_id, finding.gpu_index) in seen:
            continue  # the same GPU named again in the burst: already suspect, nothing to write
        seen.add((finding.node_id, finding.gpu_index))
        try:
            mark_gpu_suspect(
                finding.node_id,
                finding.gpu_index,
                actor=HEALTH,
                reason=f"Finding {finding.pk} ({finding.rule}): {finding.summary}",
                details={"finding": finding.pk, "rule": finding.rule, "xid": finding.xid},
            )
        except GPU.DoesNotExist:
            # The agent reported a GPU index the inventory does not hold: the finding itself is the record.
            (log.warning if warn_unknown else log.debug)(
                "Finding %s names GPU %s, not in node %s's inventory", finding.pk, finding.gpu_index, finding.node_id
            )
