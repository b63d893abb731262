"""Reads for the remediation pages and API: which remediations a user may see, a node's
panel (the ladder, the decisions, what its owner is told), and the fleet's picture (open
work by status and rung, tripped breakers, active holds, time to recover).

Every read is a fixed number of queries whatever the number of rows, with row caps.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from nodes.models import Node
from nodes.scoping import is_operator_view, visible_nodes

from .choices import APPROVABLE, LADDER, OPEN, SKIPPABLE, STATUS_COLOURS, STEP_COLOURS, Rung, Status, StepStatus
from .models import CircuitBreaker, Hold, Remediation, RemediationStep

MTTR_WINDOW = timedelta(days=30)
MAX_RECOVERIES = 20_000  # MTTR is read from at most this many recent recoveries
OLDER = 10  # earlier remediations listed on a node's panel
MAX_HOLDS = 200

# The operator verbs on a remediation and the statuses each accepts: the same guards as
# remediation.services (approve, skip_rung, stop), so the panel offers only what can work.
ACTIONS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("approve", "Approve", "primary", APPROVABLE),
    ("skip-rung", "Skip rung", "warning", SKIPPABLE),
    ("stop", "Stop", "danger", OPEN),
)

# What a node's owner is told while a remediation is open, in plain words.
PLAIN_OPEN: dict[str, str] = {
    Status.AWAITING_APPROVAL: "An operator is reviewing the repair plan; nothing has been done to the node yet.",
    Status.QUEUED: "Waiting for a safe moment to act (a safety limit, a hold or a maintenance window).",
    Status.DRAINING: "Waiting for the job on the node to end; the repair starts then.",
    Status.RUNNING: "Being repaired: {rung}.",
    Status.VALIDATING: "Repaired; being re-validated before it returns to production.",
}


def visible_remediations(user: Any) -> QuerySet[Remediation]:
    """Staff see every remediation; a customer only those on their tenant's nodes."""
    if is_operator_view(user):
        return Remediation.objects.all()
    return Remediation.objects.filter(node__in=visible_nodes(user))


# --- A node's panel ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LadderRung:
    """One rung of the ladder as this remediation met it: current or not, its step if tried."""

    rung: str
    label: str
    current: bool
    step: RemediationStep | None

    @property
    def colour(self) -> str:
        return STEP_COLOURS.get(self.step.status, "#888") if self.step else "#888"


def ladder(rem: Remediation, steps: Sequence[RemediationStep]) -> list[LadderRung]:
    """Every rung in order, the remediation's current one marked, tried ones with their step."""
    by_rung = {step.rung: step for step in steps}
    return [LadderRung(rung, Rung(rung).label, rung == rem.rung, by_rung.get(rung)) for rung in LADDER]


def decisions(rem: Remediation) -> list[dict[str, Any]]:
    """The remediation's decisions, oldest first, with ``at`` read back into a datetime."""
    return [
        {**d, "at": parse_datetime(d.get("at", "")) if isinstance(d.get("at"), str) else None}
        for d in rem.decisions or []
        if isinstance(d, dict)
    ]


def outlook(rem: Remediation, steps: Sequence[RemediationStep]) -> str:
    """What happened and when the node will be back, as its owner is told."""
    if rem.status in PLAIN_OPEN:
        text = PLAIN_OPEN[rem.status].format(rung=Rung(rem.rung).label.lower())
        running = next((s for s in steps if s.status == StepStatus.RUNNING), None)
        if rem.status == Status.RUNNING and running is not None:
            text += (
                f" This step should be done by {running.deadline:%Y-%m-%d %H:%M} UTC, then the node is re-validated."
            )
        return text
    ended = f"{rem.finished:%Y-%m-%d %H:%M} UTC" if rem.finished else "an unknown time"
    if rem.status == Status.SUCCEEDED:
        return f"Back in production since {ended}."
    if rem.status == Status.CLEARED:
        return f"The problem went away by itself before the job ended ({ended}); the node stayed in production."
    if rem.status == Status.HANDED_OFF:
        who = "the vendor (RMA)" if rem.rung == Rung.RMA else "a technician"
        return f"Handed to {who} on {ended}; the node returns after the repair and a re-validation."
    if rem.status == Status.STOPPED:
        return f"Automated repair stopped on {ended}; an operator decides what happens next."
    return f"No automated repair worked (ended {ended}); an operator decides what happens next."


def node_panel(node: Node) -> dict[str, Any]:
    """The node's current (or last) remediation with its ladder and decisions, and earlier ones."""
    recent = list(
        Remediation.objects.filter(node=node)
        .select_related("finding", "policy")
        .order_by("-created", "-id")[: OLDER + 1]
    )
    current = next((r for r in recent if r.is_open), recent[0] if recent else None)
    if current is None:
        return {"current": None, "older": []}
    steps = list(current.steps.all())
    return {
        "current": current,
        "colour": STATUS_COLOURS.get(current.status, "#888"),
        "ladder": ladder(current, steps),
        "decisions": decisions(current),
        "outlook": outlook(current, steps),
        "older": [r for r in recent if r.pk != current.pk][:OLDER],
    }


def actions_for(rem: Remediation | None) -> list[dict[str, str]]:
    """The operator verbs the remediation's status allows (the caller checks the permission)."""
    if rem is None:
        return []
    return [
        {"name": name, "label": label, "style": style}
        for name, label, style, statuses in ACTIONS
        if rem.status in statuses
    ]


# --- The fleet -----------------------------------------------------------------------------------


def open_by_status_and_rung(remediations: QuerySet[Remediation]) -> dict[tuple[str, str], int]:
    """The open remediation records (status in ``OPEN``) per (status, rung), in one query: the one
    definition of "open remediations" the remediation page, the overview and /metrics share. Not the
    nodes in the Remediation lifecycle state (``nodes.counts``): a record may be open while its node
    is still in triage or draining, and a handed-off record is closed while its node is in repair."""
    rows = remediations.filter(status__in=OPEN).values_list("status", "rung").annotate(n=Count("id")).order_by()
    return {(status, rung): n for status, rung, n in rows}


def open_counts(remediations: QuerySet[Remediation]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Open remediations per status and per rung (tiles), from one query."""
    by_status: Counter[str] = Counter()
    by_rung: Counter[str] = Counter()
    for (status, rung), n in open_by_status_and_rung(remediations).items():
        by_status[status] += n
        by_rung[rung] += n
    return (
        [{"status": s, "label": Status(s).label, "count": by_status[s], "colour": STATUS_COLOURS[s]} for s in OPEN],
        [{"rung": r, "label": Rung(r).label, "count": by_rung[r]} for r in LADDER],
    )


def tripped_breakers() -> QuerySet[CircuitBreaker]:
    # cluster: its name on every row. At most one tripped breaker per cluster (a constraint).
    return CircuitBreaker.objects.filter(reset_at__isnull=True).select_related("cluster").order_by("-tripped_at")


def active_holds(now: datetime | None = None) -> list[Hold]:
    now = now or timezone.now()
    # The four possible targets, one of which names the hold on every row.
    holds = (
        Hold.objects.filter(released_at__isnull=True)
        .filter(Q(until__isnull=True) | Q(until__gt=now))
        .select_related("node", "cluster", "rack", "tenant")
        .order_by("-created", "-id")
    )
    return list(holds[:MAX_HOLDS])


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 to 100), interpolated between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _stats(seconds: list[float]) -> dict[str, Any]:
    median, p90 = percentile(seconds, 50), percentile(seconds, 90)
    return {
        "count": len(seconds),
        "median_s": median,
        "p90_s": p90,
        "median": duration_text(median),
        "p90": duration_text(p90),
    }


def mttr(remediations: QuerySet[Remediation], now: datetime | None = None) -> dict[str, Any]:
    """Time from the finding to back in production of the remediations that succeeded in the
    window: median and 90th percentile, over all and per cluster (by name; "" for none).

    The clock starts when the finding was recorded (the remediation's own start if it has none),
    so time spent queued, draining and re-validating all counts.
    """
    now = now or timezone.now()
    rows = (
        remediations.filter(status=Status.SUCCEEDED, finished__isnull=False, finished__gte=now - MTTR_WINDOW)
        .annotate(began=Coalesce("finding__created", "created"))
        .order_by("-finished")
        .values_list("node__cluster__name", "began", "finished")[:MAX_RECOVERIES]
    )
    overall: list[float] = []
    per_cluster: dict[str, list[float]] = defaultdict(list)
    for cluster, began, finished in rows:
        seconds = max((finished - began).total_seconds(), 0.0)
        overall.append(seconds)
        per_cluster[cluster or ""].append(seconds)
    return {
        "window_days": MTTR_WINDOW.days,
        "overall": _stats(overall),
        "clusters": [{"cluster": name, **_stats(values)} for name, values in sorted(per_cluster.items())],
    }
