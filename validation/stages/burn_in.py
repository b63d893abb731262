"""Stage 3, burn-in: the active checks through the node agent, judged by the profile's
Day 1 spec, while the passive rules keep watching (a catastrophic finding fails it).

Runs GPU stress (floor ``min_tflops_per_gpu`` on every GPU), DCGM diagnostics at
``dcgm_level``, the NCCL single-node all-reduce (floor ``min_busbw_gbps``) and the GPU
memory test. A check whose tool is missing on the node is "not available": recorded,
and a failure only where the spec says ``require_all_tools``.
"""

from __future__ import annotations

from typing import Any

from health.choices import Severity
from health.models import Finding
from nodes.choices import FINISHED, RunKind, RunStatus
from nodes.models import Run

from .base import StageContext, Verdict

REASON = "Day 1 burn-in"


def _params(ctx: StageContext) -> dict[str, dict[str, Any]]:
    spec = ctx.spec
    return {
        RunKind.GPU_STRESS: {"seconds": spec.burn_in_seconds, "min_tflops": spec.min_tflops_per_gpu},
        RunKind.DCGM_DIAG: {"level": spec.dcgm_level},
        RunKind.NCCL_TEST: {},
        RunKind.MEMORY_TEST: {"fraction": spec.memory_test_fraction},
    }


def _ask(node_id: int, kind: str, params: dict[str, Any]) -> int | None:
    """Ask the agent for one check; an operator's open run of this kind, asked for since, counts
    instead (``None``: it went away meanwhile)."""
    from checks.services import CheckConflict, request_check
    from nodes.services import Actor

    try:
        return request_check(node_id, kind, params=params, actor=Actor.system("validation"), reason=REASON).pk
    except CheckConflict:
        return (
            Run.objects.filter(node_id=node_id, kind=kind, status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
            .values_list("pk", flat=True)
            .first()
        )


def start(ctx: StageContext) -> Verdict | None:
    from checks.services import cancel_check
    from nodes.services import Actor

    actor = Actor.system("validation")
    started = ctx.run.started or ctx.run.created
    run_ids: dict[str, int | None] = {}
    for kind, params in _params(ctx).items():
        # A check still queued from before this stage began (before the reboot or repair being
        # verified) would judge the node as it was: withdrawn, and asked for again.
        for stale in Run.objects.filter(
            node_id=ctx.node.pk, kind=kind, status=RunStatus.QUEUED, created__lt=started
        ).values_list("pk", flat=True):
            cancel_check(stale, actor=actor, reason=f"{REASON}: asked before this stage began; asked again")
        run_ids[kind] = _ask(ctx.node.pk, kind, params)
    ctx.run.details = {**ctx.run.details, "checks": run_ids}
    return None


def _ask_again_for_cancelled(ctx: StageContext, runs: list[Run]) -> bool:
    """A check of this stage that was cancelled (by an operator, or by our own machinery) says
    nothing about the hardware: it is asked for again and the stage waits; its deadline still
    bounds it, and an operator who wants it over skips the stage. True if any was asked again."""
    cancelled = [r for r in runs if r.status == RunStatus.CANCELLED]
    if not cancelled:
        return False
    params = _params(ctx)
    checks = dict(ctx.run.details.get("checks") or {})
    for run in cancelled:
        checks[run.kind] = _ask(ctx.node.pk, run.kind, params.get(run.kind, {}))
    ctx.run.details = {
        **ctx.run.details,
        "checks": checks,
        "asked_again": int(ctx.run.details.get("asked_again") or 0) + len(cancelled),
    }
    return True


def judge(ctx: StageContext, runs: list[Run]) -> Verdict:
    """Every check has finished: pass or fail, with the figures that decided."""
    spec = ctx.spec
    problems: list[str] = []
    notes: list[str] = []
    figures: dict[str, float] = {}
    for run in runs:
        label = RunKind(run.kind).label
        if run.status == RunStatus.NOT_AVAILABLE:
            (problems if spec.require_all_tools else notes).append(f"{label} not available: {run.summary}")
            continue
        if run.status != RunStatus.PASSED:
            problems.append(f"{label} {run.get_status_display().lower()}: {run.summary or run.error}")
        for name, value in (run.figures or {}).items():
            if isinstance(value, int | float):
                figures[f"{run.kind}.{name}"] = float(value)
        if run.kind == RunKind.NCCL_TEST and spec.min_busbw_gbps and run.status == RunStatus.PASSED:
            busbw = (run.figures or {}).get("busbw_gbps")
            if busbw is None or busbw < spec.min_busbw_gbps:
                problems.append(f"NCCL bus bandwidth {busbw} GB/s below {spec.min_busbw_gbps:g} GB/s")
        if run.kind == RunKind.GPU_STRESS and spec.min_tflops_per_gpu and run.status == RunStatus.PASSED:
            low = (run.figures or {}).get("min_tflops")
            if low is None or low < spec.min_tflops_per_gpu:
                problems.append(f"GPU stress {low} TFLOP/s below {spec.min_tflops_per_gpu:g} TFLOP/s")
    evidence = {"checks": {r.kind: {"run": r.pk, "status": r.status, "summary": r.summary} for r in runs}}
    if problems:
        return Verdict(False, "Burn-in failed: " + "; ".join(problems), figures=figures, evidence=evidence)
    note = f" ({'; '.join(notes)})" if notes else ""
    return Verdict(
        True,
        f"Burn-in passed: {len(runs) - len(notes)} check(s) met the thresholds{note}.",
        figures=figures,
        evidence=evidence,
    )


def poll(ctx: StageContext) -> Verdict | None:
    started = ctx.run.started or ctx.run.created
    catastrophic = (
        Finding.objects.filter(node_id=ctx.node.pk, shadow=False, created__gte=started, severity=Severity.CATASTROPHIC)
        .order_by("created")
        .first()
    )
    if catastrophic is not None:
        return Verdict.fail(
            f"Catastrophic finding during burn-in: {catastrophic.summary}",
            finding=catastrophic.pk,
            rule=catastrophic.rule,
        )
    ids = [pk for pk in (ctx.run.details.get("checks") or {}).values() if pk]
    runs = list(Run.objects.filter(pk__in=ids).order_by("kind"))
    if _ask_again_for_cancelled(ctx, runs) or not runs or any(r.status not in FINISHED for r in runs):
        return None
    return judge(ctx, runs)
