"""Node counts per state over days: the hourly ``StateCountSnapshot``s rolled up per finished day
(``DailyStateCount``), and the read that charts of weeks and months use.

``roll_up`` is run by the hourly snapshot task: it (re)writes every finished day from the last
one rolled up to yesterday, so running it twice changes nothing. ``daily_counts`` reads finished
days from the roll-up and everything else (a period's partial first day, today, any day not yet
rolled up) from the hourly snapshots: the figures are the same as summing the snapshots, fresh
ones included, in three queries whatever the fleet's size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, CharField, Count, F, Max, Q, QuerySet, Sum, Value, When
from django.db.models.functions import TruncDate
from django.utils import timezone

from .models import DailyStateCount, StateCountSnapshot

DAY = timedelta(days=1)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def roll_up(*, today: date | None = None) -> int:
    """Roll up the snapshots of every finished day before ``today`` (default: today) not rolled up
    yet, the last day rolled up included (it may have been rolled up before it was over). Returns
    the rows written."""
    today = today or timezone.localdate()
    last = DailyStateCount.objects.aggregate(last=Max("day"))["last"]
    if last is None:
        first = StateCountSnapshot.objects.order_by("taken_at").values_list("taken_at", flat=True).first()
        if first is None:
            return 0
        last = timezone.localtime(first).date()
    if last >= today:
        return 0
    snapshots = StateCountSnapshot.objects.filter(taken_at__gte=_midnight(last), taken_at__lt=_midnight(today))
    samples = dict(
        snapshots.annotate(day=TruncDate("taken_at"))
        .values("day")
        .annotate(n=Count("taken_at", distinct=True))
        .order_by()
        .values_list("day", "n")
    )
    rows = [
        DailyStateCount(
            day=r["day"],
            state=r["state"],
            cluster_id=r["cluster_id"],
            tenant_id=r["tenant_id"],
            node_hours=r["node_hours"],
            samples=samples[r["day"]],
        )
        for r in snapshots.annotate(day=TruncDate("taken_at"))
        .values("day", "state", "cluster_id", "tenant_id")
        .annotate(node_hours=Sum("count"))
        .order_by()
    ]
    with transaction.atomic():
        DailyStateCount.objects.filter(day__gte=last, day__lt=today).delete()
        DailyStateCount.objects.bulk_create(rows, batch_size=5000)
    return len(rows)


@dataclass(frozen=True)
class DayCount:
    """Node-hours in one state on one day (of one group), and the snapshots the day had."""

    day: date
    state: str
    group: Any  # the value of the field grouped by (None when not grouped)
    node_hours: int
    samples: int


def daily_counts(
    since: datetime,
    until: datetime,
    *,
    by: str | None = None,
    scope: dict[str, Any] | None = None,
    buckets: Mapping[str, Sequence[str]] | None = None,
) -> list[DayCount]:
    """Per day in [since, until), state and ``by`` (a snapshot field such as ``cluster__name``), the
    node-hours of the snapshots taken in the period, of the ``scope`` (snapshot filters). Finished
    days wholly inside the period come from the roll-up; the rest from the hourly snapshots.

    With ``buckets`` (a name -> its states), the states are summed per bucket in the database and a
    ``DayCount``'s state is its bucket's name; states in no bucket are left out (and so are the hourly
    snapshots with none in a bucket from ``samples``). A chart that needs a few sums per day reads a
    few rows instead of one per state."""
    scope = scope or {}
    first_full = timezone.localtime(since).date()
    if _midnight(first_full) < since:
        first_full += DAY
    rolled_through = DailyStateCount.objects.aggregate(last=Max("day"))["last"]
    end_full = min(timezone.localtime(until).date(), rolled_through + DAY) if rolled_through else first_full
    if _midnight(end_full) > until:
        end_full -= DAY
    fields = [by] if by else []
    counts: list[DayCount] = []
    if end_full > first_full:
        rolled = (
            _bucketed(DailyStateCount.objects.filter(day__gte=first_full, day__lt=end_full, **scope), buckets)
            .values("day", "bucket", *fields)
            .annotate(hours=Sum("node_hours"), samples=Max("samples"))
            .order_by()
        )
        counts += [DayCount(r["day"], r["bucket"], r[by] if by else None, r["hours"], r["samples"]) for r in rolled]
        live = Q(taken_at__gte=since, taken_at__lt=_midnight(first_full)) | Q(
            taken_at__gte=_midnight(end_full), taken_at__lt=until
        )
    else:
        live = Q(taken_at__gte=since, taken_at__lt=until)
    return counts + _live(_bucketed(StateCountSnapshot.objects.filter(live, **scope), buckets), fields)


def _bucketed(rows: QuerySet[Any], buckets: Mapping[str, Sequence[str]] | None) -> QuerySet[Any]:
    """The rows annotated with ``bucket``: their state, or the name of the bucket that holds it."""
    if buckets is None:
        by_state: QuerySet[Any] = rows.annotate(bucket=F("state"))
        return by_state
    by_bucket: QuerySet[Any] = rows.filter(
        state__in=[state for states in buckets.values() for state in states]
    ).annotate(
        bucket=Case(
            *(When(state__in=states, then=Value(name)) for name, states in buckets.items()), output_field=CharField()
        )
    )
    return by_bucket


def _live(snapshots: QuerySet[Any], fields: Sequence[str]) -> list[DayCount]:
    """Hourly snapshots summed per day in Python (a day or two of them: a few hundred rows)."""
    hours: dict[tuple[date, str, Any], int] = defaultdict(int)
    taken: dict[date, set[datetime]] = defaultdict(set)
    for r in snapshots.values("taken_at", "bucket", *fields).annotate(n=Sum("count")).order_by():
        day = timezone.localtime(r["taken_at"]).date()
        taken[day].add(r["taken_at"])
        hours[(day, r["bucket"], r[fields[0]] if fields else None)] += r["n"]
    return [DayCount(day, state, group, n, len(taken[day])) for (day, state, group), n in hours.items()]


@dataclass(frozen=True)
class SnapshotCount:
    """Nodes in one state at one hourly snapshot (of the scope)."""

    taken_at: datetime
    state: str
    count: int


# The longest window read snapshot by snapshot (a chart of hours); longer ones read ``daily_counts``.
HOURLY_SPAN = timedelta(hours=48)


def snapshot_counts(since: datetime, until: datetime, *, scope: dict[str, Any] | None = None) -> list[SnapshotCount]:
    """Per snapshot taken in [since, until] and state, the nodes of the ``scope`` (snapshot filters).

    For short windows only (at most :data:`HOURLY_SPAN`: about 48 snapshots): a day-by-day chart of
    an hour or a day would be one point.
    """
    if until - since > HOURLY_SPAN:
        raise ValueError(f"snapshot_counts reads at most {HOURLY_SPAN}; use daily_counts")
    rows = (
        StateCountSnapshot.objects.filter(taken_at__gte=since, taken_at__lte=until, **(scope or {}))
        .values("taken_at", "state")
        .annotate(n=Sum("count"))
        .order_by("taken_at", "state")
    )
    return [SnapshotCount(r["taken_at"], r["state"], r["n"]) for r in rows]
