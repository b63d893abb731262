"""The fleet report's figures of settled days, cached: a quarter's report reads the days that can no
longer change once, then only its edges (the partial first day, today) per request.

A day is **settled** once it is over by ``SETTLE``: the rows these figures count are written with
the time they are written at (a finding's ``created``, a recovery's ``finished``: ``timezone.now()``
in the services), so a day that is over gets no new rows but for a transaction still open across
midnight (``SETTLE`` covers it) and for back-dated writes (a state change recorded late, which
``followups`` sees; an import or a seed, which ends with ``outages.rebuild`` as every bulk load).

The cache holds one entry per part, scope (cluster, tenant) and block of settled days, keyed by a
**generation**: a random string in the cache that ``forget`` replaces, after commit, whenever something may
change a settled day's figures: a state change recorded into a past day, a node moved to another
cluster or tenant or deleted (the reports count by the node's cluster and tenant now;
``nodes.followups.cluster_changed``), a bulk load (``outages.rebuild``). The clusters' and tenants'
names are part of the key (a rename reads anew). Entries of an old generation are never read again (they
expire). A reader takes the generation before it reads the database, so an entry computed from data
a concurrent write changed is stored under the generation that write replaces: never read. One the
cache evicts is replaced by a new random one, never by an old value. So the figures are exactly
those of reading every row of the period (``tests/reports/test_settled.py`` compares every number).

What is cached: the availability charts' node-hours per day (``statecounts.daily_counts``; the last
day rolled up is left out, the roll-up may rewrite it), the failure causes' counts, and the newest
``MAX_RECOVERIES`` recoveries (cluster name and seconds each) from which time to recover's
percentiles are computed exactly, as PostgreSQL's percentile_cont does, and the downtime of the outages begun and over within the settled days (a
back-dated state change retires it). Remediations by rung (an open remediation climbs rungs for
days) and Day 1 yield are read as before.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Case, DurationField, ExpressionWrapper, F, FloatField, Func, Max, Q, QuerySet, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from redis.exceptions import RedisError

from fleet.models import Cluster, Tenant
from health.models import Finding
from nodes import statecounts
from nodes.models import DailyStateCount
from remediation.choices import Status
from remediation.models import Remediation
from remediation.summary import percentile

from . import charts, outages, summary
from .flows import DAY, midnight

log = logging.getLogger(__name__)
T = TypeVar("T")
SETTLE = timedelta(minutes=10)  # a day's rows are all committed this long after it ends
TTL = 2 * 24 * 3600  # seconds: an entry is read for a day (its block then moves on), kept a day longer
GENERATION_KEY = "reports:settled:generation"
# In every entry's key: bump it when the shape of a cached value changes (a deploy must not read
# the old shape from a shared cache).
SHAPE = 1


@dataclass(frozen=True)
class Days:
    """[first, end): the settled days a report's period holds whole; ``since``/``until`` its edges."""

    since: datetime
    until: datetime
    first: date
    end: date

    @property
    def head_end(self) -> datetime:
        """The end of the period's part before the settled days (its partial first day)."""
        return min(midnight(self.first), self.until)

    @property
    def tail_start(self) -> datetime:
        """The start of the period's part after the settled days (today, a day not settled yet)."""
        return max(midnight(self.end), self.head_end)

    def edge(self, field: str) -> Q:
        """The period less the settled days, on ``field``."""
        return Q(**{f"{field}__gte": self.since, f"{field}__lt": self.head_end}) | Q(
            **{f"{field}__gte": self.tail_start, f"{field}__lt": self.until}
        )

    def block(self, field: str) -> Q:
        """The settled days, on ``field``."""
        return Q(**{f"{field}__gte": midnight(self.first), f"{field}__lt": midnight(self.end)})


def settled_days(since: datetime, until: datetime, now: datetime | None = None) -> Days:
    """The whole days of [since, until) over by ``SETTLE`` at ``now`` (an empty block when none)."""
    now = now or timezone.now()
    first = timezone.localtime(since).date()
    if midnight(first) < since:
        first += DAY
    end = timezone.localtime(min(until, now)).date()
    if midnight(end) + SETTLE > now:
        end -= DAY
    return Days(since, until, first, max(end, first))


def generation() -> str:
    """The cache's current generation (a new one when it has none), with the clusters' and tenants'
    names: the cached figures carry them, so a rename or a deletion reads anew (two small reads).
    "" when the cache does not answer: the page then reads every row."""
    try:
        current = cache.get(GENERATION_KEY)
        if current is None:
            cache.add(GENERATION_KEY, uuid.uuid4().hex, None)
            # Evicted at once: a generation of our own, which no later reader takes.
            current = cache.get(GENERATION_KEY) or uuid.uuid4().hex
    except RedisError as exc:
        log.warning("reports: the cache does not answer, reading every row: %s", exc)
        return ""
    names = repr(
        (
            list(Cluster.objects.order_by("pk").values_list("pk", "name")),
            list(Tenant.objects.order_by("pk").values_list("pk", "name")),
        )
    )
    return f"{current}-{hashlib.blake2b(names.encode(), digest_size=8).hexdigest()}"


def forget() -> None:
    """After commit, start a new generation: every cached entry is retired (a settled day's figures
    may have changed)."""
    transaction.on_commit(_new_generation)


def _new_generation() -> None:
    try:
        cache.set(GENERATION_KEY, uuid.uuid4().hex, None)
    except RedisError:
        # After commit: the write stands, the page must not fail. Entries it should retire may
        # be read until their block moves on (a day) or the cache is flushed: say so loudly.
        log.exception("reports: could not retire the cached figures of settled days (flush the cache)")


def forget_if_before_today(at: datetime | None) -> None:
    """``forget`` when ``at`` falls in a day before today (a back-dated row)."""
    if at is not None and at < midnight(timezone.localdate()):
        forget()


def cached(part: str, ids: dict[str, int | None], days: Days, compute: Callable[[], T], generation: str) -> T:
    """The part's figures of the settled days, from the cache or ``compute()`` (then stored).
    Without a shared cache (``NODEWARDEN_SETTLED_CACHE``), always ``compute()``."""
    if not settings.NODEWARDEN_SETTLED_CACHE or not generation:
        return compute()
    key = f"reports:settled:{SHAPE}:{generation}:{part}:{ids.get('cluster_id')}:{ids.get('tenant_id')}:{days.first}:{days.end}"
    try:
        value: T | None = cache.get(key)
    except RedisError:
        return compute()
    if value is None:
        value = compute()
        try:
            cache.set(key, value, TTL)
        except RedisError:
            log.warning("reports: could not cache %s", part)
    return value


# --- Availability over time ----------------------------------------------------------------------


def availability(ids: dict[str, int | None], since: datetime, until: datetime, generation: str) -> dict[str, list[Any]]:
    """``statecounts.daily_counts`` by cluster and by tenant name, with the settled days rolled up
    before the last day rolled up from the cache."""
    scope = {k: v for k, v in ids.items() if v is not None}
    days = settled_days(since, until)
    rolled = DailyStateCount.objects.aggregate(last=Max("day"))["last"]
    # The last day rolled up may be rolled up again (a late snapshot): not cached.
    end = min(days.end, rolled) if rolled else days.first
    by = ("cluster__name", "tenant__name")

    def read(a: datetime, b: datetime) -> list[list[statecounts.DayCount]]:
        return [
            statecounts.daily_counts(a, b, by=field, scope=scope, buckets=charts.AVAILABILITY_BUCKETS) for field in by
        ]

    if end <= days.first:
        return dict(zip(by, read(since, until), strict=True))
    days = Days(since, until, days.first, end)
    block = cached("availability", ids, days, lambda: read(midnight(days.first), midnight(days.end)), generation)
    head = read(since, days.head_end) if since < days.head_end else [[], []]
    tail = read(days.tail_start, until)
    return {field: head[i] + block[i] + tail[i] for i, field in enumerate(by)}


# --- Failure causes ------------------------------------------------------------------------------


def failure_causes(
    findings: QuerySet[Finding], ids: dict[str, int | None], days: Days, generation: str
) -> list[dict[str, Any]]:
    """``summary.failure_causes``: the settled days' counts per (rule, XID, fabric kind) from the
    cache, the edges' counted now, summed, then named and ranked as there."""
    rows: Counter[tuple[str, int | None, str | None]] = Counter()
    block = (
        []
        if days.end <= days.first
        else cached(
            "causes", ids, days, lambda: summary.cause_counts(findings.filter(days.block("created"))), generation
        )
    )
    for source in (block, summary.cause_counts(findings.filter(days.edge("created")))):
        for r in source:
            rows[(r["rule"], r["xid"], r["fabric_kind"])] += r["n"]
    return summary.causes_of(
        [{"rule": rule, "xid": xid, "fabric_kind": kind, "n": n} for (rule, xid, kind), n in rows.items()]
    )


# --- Downtime ------------------------------------------------------------------------------------


def downtime(scope: outages.Scope, ids: dict[str, int | None], days: Days, generation: str) -> dict[str, Any]:
    """``summary.downtime``: the outages begun and over within the settled days from the cache (their
    seconds and attribution are the same for any period around them), the others read now."""
    if days.end <= days.first:
        return summary.downtime_of(outages.downtime_by_attribution(scope, days.since, days.until))
    start, end = midnight(days.first), midnight(days.end)
    inside = outages.Block(start, end, inside=True)
    block = cached(
        "downtime",
        ids,
        days,
        lambda: outages.downtime_by_attribution(scope, days.since, days.until, block=inside),
        generation,
    )
    rest = outages.downtime_by_attribution(scope, days.since, days.until, block=outages.Block(start, end, inside=False))
    merged: dict[tuple[int | None, str], dict[str, Any]] = {}
    for r in [*block, *rest]:
        row = merged.setdefault((r["cluster_id"], r["attribution"]), {**r, "outages": 0, "seconds": 0.0})
        row["outages"] += r["outages"]
        row["seconds"] += r["seconds"]
    return summary.downtime_of(list(merged.values()))


# --- Time to recover -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recoveries:
    """Recoveries newest first, compact to cache and to read back: per recovery its cluster (an index
    into ``names``; "" for none), the seconds from its finding to back in production, and when it
    finished (Unix time)."""

    names: list[str]
    cluster: array[int]
    seconds: array[float]
    finished: array[float]

    def split(self, at: datetime) -> tuple[Recoveries, Recoveries]:
        """The recoveries finished at or after ``at``, and the older ones."""
        n = sum(1 for t in self.finished if t >= at.timestamp())
        return (
            Recoveries(self.names, self.cluster[:n], self.seconds[:n], self.finished[:n]),
            Recoveries(self.names, self.cluster[n:], self.seconds[n:], self.finished[n:]),
        )


class _Epoch(Func):
    """Seconds since the epoch of a timestamp, or in an interval, as PostgreSQL counts them."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"
    output_field = FloatField()


def _recoveries(remediations: QuerySet[Remediation], where: Q) -> Recoveries:
    """The newest ``MAX_RECOVERIES`` recoveries matching ``where``."""
    # The finding's time copied onto the remediation, or its own start when the finding is gone:
    # the same clock as summary.mttr, read from the remediation row alone.
    began = Coalesce(Case(When(finding_id__isnull=False, then=F("finding_created"))), F("created"))
    recoveries = (
        remediations.filter(where, status=Status.SUCCEEDED, finished__isnull=False)
        .annotate(began=began)
        .order_by("-finished")
    )
    index: dict[str, int] = {}
    found = Recoveries([], array("I"), array("d"), array("d"))
    if connection.vendor == "postgresql":
        # Seconds computed by PostgreSQL as summary.mttr's statement does: parsing two timestamps
        # per row in Python took most of a cold request's CPU (20,000 recoveries).
        rows = recoveries.annotate(
            seconds=_Epoch(ExpressionWrapper(F("finished") - F("began"), output_field=DurationField())),
            at=_Epoch(F("finished")),
        ).values_list("node__cluster__name", "seconds", "at")[: summary.MAX_RECOVERIES]
        for name, seconds, at in rows:
            found.cluster.append(index.setdefault(name or "", len(index)))
            found.seconds.append(max(seconds, 0.0))
            found.finished.append(at)
    else:
        for name, start, end in recoveries.values_list("node__cluster__name", "began", "finished")[
            : summary.MAX_RECOVERIES
        ]:
            if end is None:  # excluded by the filter; the stubs do not know it
                continue
            found.cluster.append(index.setdefault(name or "", len(index)))
            found.seconds.append(max((end - start).total_seconds(), 0.0))
            found.finished.append(end.timestamp())
    found.names.extend(index)
    return found


def mttr(
    remediations: QuerySet[Remediation], ids: dict[str, int | None], days: Days, generation: str
) -> dict[str, Any]:
    """``summary.mttr``: the newest ``MAX_RECOVERIES`` recoveries of the period (today's, then the
    settled days' from the cache, then the first partial day's), their percentiles computed here as
    PostgreSQL's percentile_cont does (``remediation.summary.percentile``)."""
    block = (
        Recoveries([], array("I"), array("d"), array("d"))
        if days.end <= days.first
        else cached("mttr", ids, days, lambda: _recoveries(remediations, days.block("finished")), generation)
    )
    # Both edges in one read, newest first: today's rows come before the first partial day's.
    today, head = _recoveries(remediations, days.edge("finished")).split(days.tail_start)
    per_cluster: dict[str, list[float]] = defaultdict(list)
    left = summary.MAX_RECOVERIES
    overall = array("d")
    for part in (today, block, head):
        taken = part.seconds[:left]
        left -= len(taken)
        overall.extend(taken)
        lists = [per_cluster[name] for name in part.names]
        for i, value in zip(part.cluster, taken, strict=False):
            lists[i].append(value)
    stats = _stats(list(overall))
    return {
        "overall": stats,
        "capped": stats["count"] == summary.MAX_RECOVERIES,
        "clusters": [{"cluster": name, **_stats(values)} for name, values in sorted(per_cluster.items()) if values],
    }


def _stats(seconds: list[float]) -> dict[str, Any]:
    seconds.sort()  # once: percentile sorts its copy again, in linear time when already sorted
    return summary.figures(len(seconds), percentile(seconds, 50), percentile(seconds, 90))
