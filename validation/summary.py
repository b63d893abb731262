"""Reads for the Day 1 pages and API: a node's progress through its current pass, and
the fleet's Day 1 picture (nodes per stage, stage durations, commonest failures).
Every read is bounded: a fixed number of queries, row caps on the time windows."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from nodes.choices import STAGE_KINDS, RunStatus
from nodes.models import Node, Run

from .choices import BY_RUN_KIND, BY_STATE, STAGES, Stage
from .services import current_pass, planned_stages

WINDOW = timedelta(days=30)
MAX_RUNS = 20_000  # durations and failures are read from at most this many recent runs
TOP_FAILURES = 8
# A figure that varies from run to run ("GPU count 7", "61.5 GB/s"), not a number that is part of a
# word: "8-GPU" or "x16" name a thing, and blanking them would merge different reasons into "N-GPU".
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w|-[^\W\d_])")


@dataclass(frozen=True)
class StageStep:
    """One stage in a node's current pass: its latest run (or none yet) and whether it is planned."""

    stage: str
    label: str
    planned: bool
    run: Run | None
    current: bool


def node_progress(node: Node) -> dict[str, Any]:
    """The node's current (or last) Day 1 pass, stage by stage."""
    pass_event = current_pass(node.pk)
    runs = Run.objects.filter(node=node, kind__in=STAGE_KINDS)
    if pass_event is not None:
        runs = runs.filter(created__gte=pass_event.created)
    latest: dict[str, Run] = {}
    for run in runs.order_by("-created", "-id")[:100][::-1]:  # the newest 100, oldest first
        latest[run.kind] = run
    if pass_event is None and not latest and node.state not in BY_STATE:
        return {"pass": None, "steps": [], "reentry": None}
    reentry, stages = planned_stages(node.pk)
    steps = [
        StageStep(
            info.stage,
            Stage(info.stage).label,
            info.stage in stages,
            latest.get(info.run_kind),
            node.state == info.state,
        )
        for info in STAGES
    ]
    return {"pass": pass_event, "steps": steps, "reentry": reentry}


def stage_counts(nodes: QuerySet[Node]) -> list[dict[str, Any]]:
    """Nodes in each Day 1 stage now, in pipeline order."""
    counts = dict(
        nodes.filter(state__in=[s.state for s in STAGES]).values_list("state").annotate(n=Count("id")).order_by()
    )
    return [
        {"stage": s.stage, "label": Stage(s.stage).label, "state": s.state, "count": counts.get(s.state, 0)}
        for s in STAGES
    ]


def _recent_runs(nodes: QuerySet[Node] | None, now: datetime) -> QuerySet[Run]:
    """Stage runs that finished in the window, of the given nodes (None: every node's, without the
    semi-join over the whole node table that ``node__in=Node.objects.all()`` costs)."""
    runs = Run.objects.filter(kind__in=STAGE_KINDS, finished__gte=now - WINDOW)
    return runs if nodes is None else runs.filter(node__in=nodes)


def stage_durations(nodes: QuerySet[Node], now: datetime | None = None) -> list[dict[str, Any]]:
    """Median and slowest duration of passed runs per stage over the window, in seconds."""
    now = now or timezone.now()
    rows = (
        _recent_runs(nodes, now)
        .filter(status=RunStatus.PASSED, started__isnull=False)
        .order_by("-finished")
        .values_list("kind", "started", "finished")[:MAX_RUNS]
    )
    by_kind: dict[str, list[float]] = {}
    for kind, started, finished in rows:
        if started is None or finished is None:  # neither is: the filters above
            continue
        by_kind.setdefault(kind, []).append((finished - started).total_seconds())
    result = []
    for info in STAGES:
        seconds = by_kind.get(info.run_kind, [])
        result.append(
            {
                "stage": info.stage,
                "label": Stage(info.stage).label,
                "runs": len(seconds),
                "median_s": statistics.median(seconds) if seconds else None,
                "slowest_s": max(seconds) if seconds else None,
            }
        )
    return result


def failure_reasons(nodes: QuerySet[Node], now: datetime | None = None) -> list[dict[str, Any]]:
    """The commonest failure reasons over the window, figures blanked so that "GPU count 7"
    and "GPU count 6" count as one reason."""
    now = now or timezone.now()
    rows = (
        _recent_runs(nodes, now)
        .filter(status=RunStatus.FAILED)
        .order_by("-finished")
        .values_list("kind", "summary")[:MAX_RUNS]
    )
    counter = Counter((kind, NUMBER.sub("N", summary)[:160]) for kind, summary in rows)
    return [
        {"stage": BY_RUN_KIND[kind].stage, "label": Stage(BY_RUN_KIND[kind].stage).label, "reason": reason, "count": n}
        for (kind, reason), n in counter.most_common(TOP_FAILURES)
    ]


def day1_yield(nodes: QuerySet[Node] | None, now: datetime | None = None) -> dict[str, Any]:
    """Of the passes that ended in the window: how many reached production, how many went to triage.
    ``nodes`` None: the whole fleet's. One query."""
    now = now or timezone.now()
    is_released = Q(kind=STAGES[-1].run_kind, status__in=(RunStatus.PASSED, RunStatus.SKIPPED))
    is_failed = Q(status=RunStatus.FAILED)
    counts = (
        _recent_runs(nodes, now)
        .filter(is_released | is_failed)
        .aggregate(released=Count("id", filter=is_released), failed=Count("id", filter=is_failed))
    )
    released, failed = counts["released"], counts["failed"]
    total = released + failed
    return {"released": released, "failed": failed, "yield_pct": round(100 * released / total, 1) if total else None}


def nodes_in_day1(nodes: QuerySet[Node], limit: int = 100) -> list[dict[str, Any]]:
    """Nodes now in a Day 1 stage, longest waiting first, each with its open stage run."""
    in_day1 = list(
        nodes.filter(state__in=[s.state for s in STAGES])
        .select_related("hardware_profile")
        .order_by("state_changed_at")[:limit]
    )
    open_runs = {
        r.node_id: r
        for r in Run.objects.filter(node__in=[n.pk for n in in_day1], kind__in=STAGE_KINDS, status=RunStatus.RUNNING)
    }
    return [{"node": n, "run": open_runs.get(n.pk)} for n in in_day1]
