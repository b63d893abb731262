"""Stage 5, reliability assessment: a soak period with no finding above warning.

The passive health rules keep running on the agent's reports; this stage only watches
their findings. A degraded or catastrophic finding since the soak began fails it at
once; so does a silent node (the heartbeat rule raises its own finding).
"""

from __future__ import annotations

from datetime import timedelta

from health.choices import Severity
from health.models import Finding

from .base import StageContext, Verdict

ABOVE_WARNING = (Severity.DEGRADED, Severity.CATASTROPHIC)


def start(ctx: StageContext) -> Verdict | None:
    return poll(ctx)


def poll(ctx: StageContext) -> Verdict | None:
    started = ctx.run.started or ctx.run.created
    bad = (
        Finding.objects.filter(node_id=ctx.node.pk, shadow=False, created__gte=started, severity__in=ABOVE_WARNING)
        .order_by("created")
        .first()
    )
    if bad is not None:
        return Verdict.fail(
            f"{bad.get_severity_display()} finding during the soak: {bad.summary}", finding=bad.pk, rule=bad.rule
        )
    soak = timedelta(seconds=ctx.spec.soak_seconds)
    if ctx.now - started < soak:
        return None
    warnings = Finding.objects.filter(node_id=ctx.node.pk, shadow=False, created__gte=started).count()
    return Verdict(
        True,
        f"Soaked {soak} with no finding above warning ({warnings} lesser finding(s)).",
        figures={"soak_seconds": soak.total_seconds(), "findings": float(warnings)},
    )
