"""The lifecycle flow: how many state changes went from each state to each other state in a
period, and which nodes made one of them (paged).

The fleet's counts of finished days are rolled up (``roll_up``, hourly: ``DailyTransitionCount``);
``fleet_transition_counts`` reads those and counts the rest of the period (its partial first day,
today, any day not rolled up yet) from the changes: the same figures as counting the changes, in
three queries whatever the period's length. A cluster's or tenant's flow is counted from the
changes, by the node's cluster and tenant now (which a roll-up would have to freeze).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from nodes.choices import NodeState
from nodes.models import NodeEvent

from .choices import STATE_CHANGE_KINDS
from .filters import Period
from .models import DailyTransitionCount

DAY = timedelta(days=1)


def midnight(day: date) -> datetime:
    """The first instant of a day in the current time zone (the days ``roll_up`` counts by)."""
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def roll_up(*, today: date | None = None) -> int:
    """Count the fleet's state changes of every finished day before ``today`` (default: today) not
    rolled up yet, the last day rolled up included (it may have been rolled up before it was over).
    Running it twice changes nothing. Returns the rows written."""
    today = today or timezone.localdate()
    changes = NodeEvent.objects.filter(kind__in=STATE_CHANGE_KINDS)
    last = DailyTransitionCount.objects.aggregate(last=Max("day"))["last"]
    if last is None:
        first = changes.order_by("created").values_list("created", flat=True).first()
        if first is None:
            return 0
        last = timezone.localtime(first).date()
    if last >= today:
        return 0
    rows = [
        DailyTransitionCount(day=r["day"], source_state=r["source_state"], target_state=r["target_state"], count=r["n"])
        for r in changes.filter(created__gte=midnight(last), created__lt=midnight(today))
        .annotate(day=TruncDate("created"))
        .values("day", "source_state", "target_state")
        .annotate(n=Count("id"))
        .order_by()
    ]
    with transaction.atomic():
        DailyTransitionCount.objects.filter(day__gte=last, day__lt=today).delete()
        DailyTransitionCount.objects.bulk_create(rows, batch_size=5000)
    return len(rows)


def forget_days_from(at: datetime) -> None:
    """Drop the roll-up of the day of ``at`` and later ones: a change was saved into them after
    they were counted. Reads then count those days from the changes; the next roll-up rewrites them."""
    if at < midnight(timezone.localdate()):
        DailyTransitionCount.objects.filter(day__gte=timezone.localtime(at).date()).delete()


def fleet_transition_counts(period: Period) -> list[dict[str, Any]]:
    """``transition_counts`` of every state change of the period: finished days wholly inside it from
    the roll-up, the rest from the changes."""
    first_full = timezone.localtime(period.since).date()
    if midnight(first_full) < period.since:
        first_full += DAY
    rolled_through = DailyTransitionCount.objects.aggregate(last=Max("day"))["last"]
    end_full = min(timezone.localtime(period.until).date(), rolled_through + DAY) if rolled_through else first_full
    changes = NodeEvent.objects.filter(kind__in=STATE_CHANGE_KINDS)
    if end_full <= first_full:
        return _listed(_counted(changes.filter(created__gte=period.since, created__lt=period.until)))
    rolled = (
        DailyTransitionCount.objects.filter(day__gte=first_full, day__lt=end_full)
        .values_list("source_state", "target_state")
        .annotate(n=Sum("count"))
        .order_by()
    )
    live = changes.filter(
        Q(created__gte=period.since, created__lt=midnight(first_full))
        | Q(created__gte=midnight(end_full), created__lt=period.until)
    )
    counts = _counted(live)
    for source, target, n in rolled:
        counts[(source, target)] += n
    return _listed(counts)


def _counted(events: QuerySet[NodeEvent]) -> Counter[tuple[str, str]]:
    # COUNT(*), not COUNT(id): the id is not in the index on state changes, which then answers alone.
    return Counter(
        {
            (source, target): n
            for source, target, n in events.values_list("source_state", "target_state")
            .annotate(n=Count("*"))
            .order_by()
        }
    )


def _listed(counts: Counter[tuple[str, str]]) -> list[dict[str, Any]]:
    """Flows as the pages show them: commonest first, then by source and target."""
    labels = dict(NodeState.choices)
    ordered = sorted(
        ((source, target, n) for (source, target), n in counts.items() if n),
        key=lambda flow: (-flow[2], flow[0], flow[1]),
    )
    return [
        {
            "source": source,
            "target": target,
            "count": n,
            "source_label": labels.get(source, source),
            "target_label": labels.get(target, target),
        }
        for source, target, n in ordered
    ]


def state_changes(
    events: QuerySet[NodeEvent], period: Period, *, cluster_id: int | None = None, tenant_id: int | None = None
) -> QuerySet[NodeEvent]:
    """State changes (transitions and forced ones) of the period, of one cluster and/or tenant.

    The cluster and tenant are the node's now: a node moved between clusters counts in its new one."""
    events = events.filter(kind__in=STATE_CHANGE_KINDS, created__gte=period.since, created__lt=period.until)
    if cluster_id is not None:
        events = events.filter(node__cluster_id=cluster_id)
    if tenant_id is not None:
        events = events.filter(node__tenant_id=tenant_id)
    return events


def transition_counts(events: QuerySet[NodeEvent]) -> list[dict[str, Any]]:
    """(source, target, count) of the given state changes, commonest first: one query."""
    return _listed(_counted(events))


def flow_nodes(events: QuerySet[NodeEvent], source: str, target: str) -> QuerySet[NodeEvent, Mapping[str, Any]]:
    """The nodes that went from ``source`` to ``target`` among the given changes: one row per node
    with how often and when last, most recent first (a queryset: the caller pages it)."""
    return (
        events.filter(source_state=source, target_state=target)
        .values("node_id", "hostname")
        .annotate(times=Count("*"), last=Max("created"))
        .order_by("-last", "node_id")
    )
