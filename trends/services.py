"""The daily trend evaluation: the only writer of trend flags and trend runs.

evaluate(*, now=None) -> TrendRun
    Read the fleet a batch of nodes at a time (``trends.collect``: a fixed number of queries
    per batch), judge every node (``trends.analysis``): figures degrading over the trend
    window, figures well below the hardware profile's peers, lemon scores over the lemon
    window. Then, for each (node, kind, figure):
    - newly past its threshold: open a ``TrendFlag`` and raise a finding through
      ``health.services.raise_finding`` (rules ``trend_degrading`` warning,
      ``peer_underperformer`` degraded, ``lemon_node`` degraded; subject = the figure), so
      it goes the road of every other signal (remediation considers degraded findings);
    - still past ``CLEAR_RATIO`` of it: refresh the open flag's evidence (no new finding);
    - gone: clear the flag and resolve its alert (``health.services.clear_condition``).
    A lemon whose score reaches ``NODEWARDEN_LEMON_REPAIR_SCORE`` (setting; default none) is
    raised with recommended action "inspect", which remediation maps to the repair rung.

Re-running is harmless: open flags are unique per (node, kind, figure) in the database and a
finding is raised only when a flag opens (or a lemon crosses the repair score).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from health.choices import RecommendedAction
from health.services import clear_condition, raise_finding
from nodes.services import Actor

from . import analysis, collect
from .choices import FINDING_RULES, LEMON_FIGURE, FlagKind
from .models import TrendFlag, TrendRun

log = logging.getLogger(__name__)

TRENDS = Actor.system("trends")
SOURCE = "trends"
BATCH_SIZE = 2000  # nodes per batch: ~10 queries each, bounded memory at 100,000 nodes
TOP_LEMONS = 25
MAX_INCIDENT_TIMES = 50  # kept in a lemon's evidence


@dataclass
class Verdict:
    """One (node, kind, figure) judged this run: how far past its threshold, and why."""

    node_id: int
    kind: str
    figure: str
    score: float
    ratio: float
    opens: bool
    summary: str
    evidence: dict[str, Any]
    action: str = RecommendedAction.NONE

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.node_id, self.kind, self.figure)


@dataclass
class Context:
    now: datetime
    trend_since: datetime
    lemon_since: datetime
    repair_score: float | None
    open_keys: set[tuple[int, str, str]]


def lemon_repair_score() -> float | None:
    """NODEWARDEN_LEMON_REPAIR_SCORE: the lemon score from which the finding asks for a repair (None: never)."""
    score: float | None = settings.NODEWARDEN_LEMON_REPAIR_SCORE
    return score


def current_params(repair_score: float | None) -> dict[str, Any]:
    """The windows and thresholds of a run, recorded on it (and shown on the page)."""
    return {
        "trend_window_days": analysis.TREND_WINDOW_DAYS,
        "lemon_window_days": analysis.LEMON_WINDOW_DAYS,
        "peer_threshold": analysis.PEER_THRESHOLD,
        "peer_min_z": analysis.PEER_MIN_Z,
        "peer_min_nodes": analysis.PEER_MIN_NODES,
        "lemon_threshold": analysis.LEMON_THRESHOLD,
        "lemon_repair_score": repair_score,
        "clear_ratio": analysis.CLEAR_RATIO,
        "trends": {
            s.figure: {"direction": s.direction, "threshold": s.threshold, "relative": s.relative}
            for s in analysis.TREND_SPECS.values()
        },
        "lemon_weights": {s.name: s.weight for s in analysis.LEMON_SIGNALS},
    }


def evaluate(*, now: datetime | None = None) -> TrendRun:
    """Judge every node and bring the flags (and their findings) up to date. See the module docstring."""
    now = now or timezone.now()
    repair_score = lemon_repair_score()
    run = TrendRun.objects.create(started=now, params=current_params(repair_score))
    open_flags = {(f.node_id, f.kind, f.figure): f for f in TrendFlag.objects.filter(cleared_at__isnull=True)}
    ctx = Context(
        now=now,
        trend_since=now - timedelta(days=analysis.TREND_WINDOW_DAYS),
        lemon_since=now - timedelta(days=analysis.LEMON_WINDOW_DAYS),
        repair_score=repair_score,
        open_keys=set(open_flags),
    )
    try:
        verdicts, lemons, run.nodes = _judge_fleet(ctx)
        run.top_lemons = lemons
        run.opened, run.refreshed, run.cleared = _reconcile(open_flags, verdicts, ctx)
    except Exception as exc:
        # The run stays unfinished (the pages show the last finished one) and says why.
        TrendRun.objects.filter(pk=run.pk).update(error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    run.finished = timezone.now()
    run.save(update_fields=["nodes", "top_lemons", "opened", "refreshed", "cleared", "finished"])
    return run


# --- Judging -----------------------------------------------------------------------------------------


def _judge_fleet(ctx: Context) -> tuple[dict[tuple[int, str, str], Verdict], list[dict[str, Any]], int]:
    """Verdicts worth acting on (opening, or about an open flag), the top lemons, the node count."""
    verdicts: dict[tuple[int, str, str], Verdict] = {}
    # Peers are compared fleet-wide, after every batch: only each node's latest value is kept.
    latest: dict[tuple[str, int], list[tuple[collect.NodeRow, float, datetime]]] = defaultdict(list)
    top: list[tuple[int, analysis.LemonScore]] = []
    rows = collect.nodes()
    by_pk = {row.pk: row for row in rows}
    app_xids = collect.application_xids()
    for chunk in _chunks(rows, BATCH_SIZE):
        batch = collect.read_batch(
            chunk, now=ctx.now, trend_since=ctx.trend_since, lemon_since=ctx.lemon_since, app_xids=app_xids
        )
        scores = _judge_batch(chunk, batch, ctx, verdicts, latest)
        # A running top list, so the scores of 100,000 nodes are never held at once.
        top = analysis.top_offenders({**dict(top), **scores}, TOP_LEMONS)
    for (figure, _profile), members in latest.items():
        for verdict in _peer_verdicts(figure, members):
            _keep(verdicts, ctx, verdict)
    return verdicts, [_lemon_row(by_pk[pk], score) for pk, score in top], len(rows)


def _judge_batch(
    chunk: Sequence[collect.NodeRow],
    batch: collect.Batch,
    ctx: Context,
    verdicts: dict[tuple[int, str, str], Verdict],
    latest: dict[tuple[str, int], list[tuple[collect.NodeRow, float, datetime]]],
) -> dict[int, analysis.LemonScore]:
    """Trends and lemon scores of one batch's nodes; their latest peer figures go into ``latest``."""
    scores: dict[int, analysis.LemonScore] = {}
    for row in chunk:
        for figure in analysis.TREND_SPECS:
            series = batch.series.get((row.pk, figure))
            if not series:
                continue
            if figure in analysis.PEER_FIGURES:
                latest[(figure, row.profile_id)].append((row, series[-1][1], series[-1][0]))
            _keep(verdicts, ctx, _trend_verdict(row, figure, series, ctx))
        scores[row.pk] = _lemon(row, batch, ctx)
        _keep(verdicts, ctx, _lemon_verdict(row, scores[row.pk], batch.incidents.get(row.pk, []), ctx))
    return scores


def _chunks(rows: Sequence[collect.NodeRow], size: int) -> Iterator[Sequence[collect.NodeRow]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _keep(verdicts: dict[tuple[int, str, str], Verdict], ctx: Context, verdict: Verdict | None) -> None:
    # Only what opens a flag or speaks about an open one is kept: memory stays bounded by the flags.
    if verdict is not None and (verdict.opens or verdict.key in ctx.open_keys):
        verdict.evidence["summary"] = verdict.summary
        verdicts[verdict.key] = verdict


def _x(at: datetime, ctx: Context) -> float:
    return (at - ctx.trend_since) / timedelta(days=1)


def _trend_verdict(
    row: collect.NodeRow, figure: str, series: list[tuple[datetime, float]], ctx: Context
) -> Verdict | None:
    spec = analysis.TREND_SPECS[figure]
    found = analysis.trend(spec, [(_x(at, ctx), value) for at, value in series])
    if found is None:
        return None
    first, last = series[0][0], series[-1][0]
    change = (
        f"{abs(found.share_per_week) * 100:.1f} %/week"
        if found.share_per_week is not None
        else f"{abs(found.per_week):,.2f} {spec.unit}/week"
    )
    evidence = {
        "figure": figure,
        "label": spec.label,
        "unit": spec.unit,
        "direction": spec.direction,
        "threshold": spec.threshold,
        "relative": spec.relative,
        "window_days": analysis.TREND_WINDOW_DAYS,
        "points": [[at.isoformat(), round(value, 4)] for at, value in series],
        "line": [
            [first.isoformat(), round(found.fit.at(_x(first, ctx)), 4)],
            [last.isoformat(), round(found.fit.at(_x(last, ctx)), 4)],
        ],
        "per_week": round(found.per_week, 4),
        "share_per_week": None if found.share_per_week is None else round(found.share_per_week, 5),
        "n": found.fit.n,
        "r2": round(found.fit.r2, 4),
        "t": _finite(found.fit.t),
    }
    moving = "falling" if found.per_week < 0 else "climbing"
    summary = (
        f"{spec.label} {moving} {change} over "
        f"{(last - first).days} days ({series[0][1]:,.1f} → {series[-1][1]:,.1f} {spec.unit})"
    )
    score = found.share_per_week * 100 if found.share_per_week is not None else found.per_week
    return Verdict(row.pk, FlagKind.DEGRADING, figure, round(score, 3), found.ratio, found.degrading, summary, evidence)


def _peer_verdicts(figure: str, members: list[tuple[collect.NodeRow, float, datetime]]) -> list[Verdict]:
    stats = analysis.peer_stats([value for _, value, _ in members])
    if stats is None:
        return []
    spec = analysis.TREND_SPECS[figure]
    hist = analysis.histogram([value for _, value, _ in members])
    out = []
    for row, value, at in members:
        found = analysis.compare_to_peers(value, stats)
        if found is None or found.ratio < analysis.CLEAR_RATIO:
            continue
        evidence = {
            "figure": figure,
            "label": spec.label,
            "unit": spec.unit,
            "value": value,
            "at": at.isoformat(),
            "median": stats.median,
            "mad": stats.mad,
            "peers": stats.n,
            "profile": row.profile,
            "profile_id": row.profile_id,
            "deficit_pct": round(found.deficit * 100, 2),
            "robust_z": _finite(found.robust_z),
            "threshold_pct": analysis.PEER_THRESHOLD * 100,
            "min_z": analysis.PEER_MIN_Z,
            "window_days": analysis.TREND_WINDOW_DAYS,
            "histogram": hist,
        }
        summary = (
            f"{spec.label} {found.deficit * 100:.1f} % below the median of {stats.n} {row.profile} nodes "
            f"({value:,.1f} vs {stats.median:,.1f} {spec.unit})"
        )
        out.append(
            Verdict(
                row.pk,
                FlagKind.UNDERPERFORMER,
                figure,
                round(found.deficit * 100, 2),
                found.ratio,
                found.below,
                summary,
                evidence,
            )
        )
    return out


def _lemon(row: collect.NodeRow, batch: collect.Batch, ctx: Context) -> analysis.LemonScore:
    incidents = batch.incidents.get(row.pk, [])
    changes = batch.changes.get(row.pk, [])
    window_hours = analysis.LEMON_WINDOW_DAYS * 24.0
    out = analysis.out_of_production(
        collect.window_start_out(row.state, changes),
        [(collect.hours_since(at, ctx.lemon_since), collect.out_flag(target)) for at, _source, target in changes],
        window_hours,
    )
    days_in_service = max((window_hours - out.hours) / 24.0, 1.0)
    signals = {
        "incidents": len(incidents),
        "incident_rate": len(incidents) * 30.0 / days_in_service,
        "repeat_incidents": analysis.repeats(collect.hours_since(at, ctx.lemon_since) for at in incidents),
        "out_count": out.count,
        "hours_out": round(out.hours, 2),
        **{name: counts.get(row.pk, 0) for name, counts in batch.counts.items()},
    }
    return analysis.lemon_score(signals)


def _lemon_verdict(
    row: collect.NodeRow, score: analysis.LemonScore, incidents: list[datetime], ctx: Context
) -> Verdict | None:
    if score.score <= 0:
        return None
    inspect = ctx.repair_score is not None and score.score >= ctx.repair_score
    action = RecommendedAction.INSPECT if inspect else RecommendedAction.NONE
    evidence = {
        "score": round(score.score, 2),
        "threshold": analysis.LEMON_THRESHOLD,
        "repair_score": ctx.repair_score,
        "window_days": analysis.LEMON_WINDOW_DAYS,
        "signals": score.signals,
        "contributions": {k: round(v, 3) for k, v in score.contributions.items()},
        "weights": {s.name: s.weight for s in analysis.LEMON_SIGNALS},
        "references": {s.name: s.reference for s in analysis.LEMON_SIGNALS},
        "labels": {s.name: s.label for s in analysis.LEMON_SIGNALS},
        "incidents": [at.isoformat() for at in sorted(incidents)[-MAX_INCIDENT_TIMES:]],
        "recommended_action": str(action),
    }
    s = score.signals
    summary = (
        f"Lemon score {score.score:.0f}/100 over {analysis.LEMON_WINDOW_DAYS} days: "
        f"{s['incidents']:.0f} incidents, {s['xids']:.0f} XIDs, {s['tickets']:.0f} repair tickets, "
        f"{s['rmas']:.0f} RMAs, {s['hours_out']:.0f} h out of production"
    )
    return Verdict(
        row.pk,
        FlagKind.LEMON,
        LEMON_FIGURE,
        round(score.score, 2),
        score.ratio,
        score.score >= analysis.LEMON_THRESHOLD,
        summary,
        evidence,
        action,
    )


def _lemon_row(row: collect.NodeRow, score: analysis.LemonScore) -> dict[str, Any]:
    return {
        "node": row.pk,
        "hostname": row.hostname,
        "profile": row.profile,
        "score": round(score.score, 2),
        "flagged": score.score >= analysis.LEMON_THRESHOLD,
        "signals": score.signals,
        "contributions": {k: round(v, 3) for k, v in score.contributions.items()},
    }


def _finite(value: float) -> float | None:
    # JSON (and PostgreSQL's jsonb) has no infinity: a perfect line or an all-alike profile reads as null.
    return round(value, 3) if math.isfinite(value) else None


# --- Flags and findings ------------------------------------------------------------------------------


def _reconcile(
    open_flags: dict[tuple[int, str, str], TrendFlag], verdicts: dict[tuple[int, str, str], Verdict], ctx: Context
) -> tuple[int, int, int]:
    """Open, refresh and clear flags; returns (opened, refreshed, cleared)."""
    refreshed: list[TrendFlag] = []
    cleared = 0
    for key, flag in open_flags.items():
        verdict = verdicts.get(key)
        if verdict is None or verdict.ratio < analysis.CLEAR_RATIO:
            cleared += _clear(flag, ctx.now)
            continue
        before = flag.evidence.get("recommended_action", RecommendedAction.NONE)
        flag.score, flag.evidence, flag.updated = verdict.score, verdict.evidence, ctx.now
        if verdict.kind == FlagKind.LEMON and verdict.action != before and verdict.action == RecommendedAction.INSPECT:
            _escalate(flag, verdict, ctx.now)
        refreshed.append(flag)
    TrendFlag.objects.bulk_update(refreshed, ["score", "evidence", "updated", "finding"], batch_size=500)
    opened = sum(
        _open(verdict, ctx.now) for key, verdict in verdicts.items() if verdict.opens and key not in open_flags
    )
    return opened, len(refreshed), cleared


def _raise(verdict: Verdict, now: datetime) -> Any:
    rule, severity = FINDING_RULES[verdict.kind]
    evidence = {k: v for k, v in verdict.evidence.items() if k != "histogram"}
    return raise_finding(
        verdict.node_id,
        rule=rule,
        severity=severity,
        summary=verdict.summary,
        evidence=evidence,
        recommended_action=verdict.action,
        source=SOURCE,
        subject=verdict.figure,
        observed_at=now,
        actor=TRENDS,
    )


def _open(verdict: Verdict, now: datetime) -> int:
    """A new flag and its finding, in one transaction; 0 if a concurrent run opened it first."""
    try:
        with transaction.atomic():
            flag = TrendFlag.objects.create(
                node_id=verdict.node_id,
                kind=verdict.kind,
                figure=verdict.figure,
                score=verdict.score,
                evidence=verdict.evidence,
                window_days=verdict.evidence["window_days"],
                created=now,
                updated=now,
            )
            flag.finding = _raise(verdict, now)
            flag.save(update_fields=["finding"])
    except IntegrityError:
        log.info("trend flag %s already open (a concurrent evaluation)", verdict.key)
        return 0
    return 1


def _escalate(flag: TrendFlag, verdict: Verdict, now: datetime) -> None:
    """A lemon past the repair score: its alert is raised again, now asking for an inspection."""
    rule, _severity = FINDING_RULES[verdict.kind]
    clear_condition(
        flag.node_id,
        rule=rule,
        subject=flag.figure,
        reason="lemon score reached NODEWARDEN_LEMON_REPAIR_SCORE: raised again for repair",
    )
    flag.finding = _raise(verdict, now)


def _clear(flag: TrendFlag, now: datetime) -> int:
    """The condition is gone: the flag closes and its alert resolves. 0 if another run cleared it."""
    rule, _severity = FINDING_RULES[flag.kind]
    with transaction.atomic():
        if not TrendFlag.objects.filter(pk=flag.pk, cleared_at__isnull=True).update(cleared_at=now):
            return 0
        clear_condition(
            flag.node_id,
            rule=rule,
            subject=flag.figure,
            reason=f"{flag.get_kind_display()} {flag.figure}: condition gone (trend evaluation)",
        )
    return 1
