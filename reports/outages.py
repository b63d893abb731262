"""Outages: a node's time out of production, read from its state changes (``NodeEvent``), and
whose downtime each one is.

- An **outage** starts with a state change that leaves the serving states (production, drain
  pending) and lasts until the node is back in them; every stay in between counts (triage,
  remediation, repair, RMA, and the re-validation that follows). Time in Day 0 and Day 1 before
  a node first reached production is no outage; an outage ends without a return when the node is
  decommissioned.
- Its **initiator** is the change that opened it, or, when that change left "drain pending",
  the change that asked for the drain (a drain is asked for by someone, then carried out by the
  system when the job ends).
- **Attribution**: *provider* when the outage went through remediation, repair or RMA (the
  hardware was at fault, whoever took the node out), or when a system component initiated it
  (a finding acted on by remediation, health, fabric or validation), except components acting on
  a request (``REQUESTED_COMPONENTS``: a re-role); *customer* otherwise: a person (operator or
  customer) drained or cordoned it with their reason, and it came back without remediation,
  repair or RMA.

The derivation is one SQL statement over the state changes (window functions, the same text on
PostgreSQL and SQLite). Its results are kept as ``Outage`` rows, rewritten per node with each state
change (``rebuild``), so the reports read a period's outages from an index instead of sorting weeks
of state changes per request: a fixed number of queries whatever the fleet's size. An outage that
began more than ``LOOKBACK`` before the period is not counted (the period's figures stay those of
reading its state changes and ``LOOKBACK`` before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from nodes.models import Node, NodeEvent

from . import models
from .choices import GONE, HARDWARE_STATES, REQUESTED_COMPONENTS, SERVING, STATE_CHANGE_KINDS, Attribution

LOOKBACK = timedelta(days=30)
WORK_MEM = "64MB"
DRAIN_PENDING = "drain_pending"


@dataclass(frozen=True)
class Scope:
    """Which nodes: all, those of a cluster and/or a tenant, or a list of ids (a page of them)."""

    cluster_id: int | None = None
    tenant_id: int | None = None
    node_ids: Sequence[int] | None = None


def _sql_list(values: Sequence[str]) -> str:
    # Constants from reports.choices, never user input: inlined so the planner sees them.
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def _seconds(start: str, end: str) -> str:
    """SQL for the seconds between two timestamp expressions."""
    if connection.vendor == "postgresql":
        return f"EXTRACT(EPOCH FROM ({end} - {start}))::float8"
    return f"((julianday({end}) - julianday({start})) * 86400.0)"


def _later(a: str, b: str) -> str:
    return f"GREATEST({a}, {b})" if connection.vendor == "postgresql" else f"MAX({a}, {b})"


def _ts(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def _scope_sql(alias: str, scope: Scope, params: dict[str, Any]) -> list[str]:
    """WHERE terms limiting ``alias``'s rows to the scope's nodes (params filled in as needed)."""
    terms, nodes = [], []
    if scope.cluster_id is not None:
        nodes.append("cluster_id = %(cluster)s")
        params["cluster"] = scope.cluster_id
    if scope.tenant_id is not None:
        nodes.append("tenant_id = %(tenant)s")
        params["tenant"] = scope.tenant_id
    if nodes:
        terms.append(f"{alias}.node_id IN (SELECT id FROM {Node._meta.db_table} WHERE {' AND '.join(nodes)})")
    if scope.node_ids is not None:
        ids = ", ".join(str(int(pk)) for pk in scope.node_ids)  # int(): never anything but numbers
        terms.append(f"{alias}.node_id IN ({ids})" if ids else "1 = 0")
    return terms


def _changes_cte(scope: Scope, since: datetime, until: datetime) -> tuple[str, dict[str, Any]]:
    """The scope's state changes that bound a stay in production or an outage, before ``until``
    (from ``LOOKBACK`` before ``since``): those from or to a serving state, into repair, remediation
    or RMA, or out of the fleet. Day 1's steps from one stage to the next are left out: they fall
    inside an outage and move none of its bounds, and leaving them out halves the rows sorted.

    Each row has when the node left the state it entered (``left_at``, NULL: still there at
    ``until``; exact for serving states, whose next change is always kept), the number of the
    outage it belongs to, and the outage's initiator (see the module docstring). Parameters are
    named (``since``, ``until``, ...) so the statements built on it can reuse them."""
    event = NodeEvent._meta.db_table
    serving, bounds = _sql_list(SERVING), _sql_list((*HARDWARE_STATES, *GONE))
    where = [
        f"e.kind IN {_sql_list(STATE_CHANGE_KINDS)}",
        "e.node_id IS NOT NULL",
        "e.created < %(until)s",
        "e.created >= %(lower)s",
        f"(e.source_state IN {serving} OR e.target_state IN {serving} OR e.target_state IN {bounds})",
    ]
    params: dict[str, Any] = {"since": _ts(since), "until": _ts(until), "lower": _ts(since - LOOKBACK)}
    where += _scope_sql("e", scope, params)
    # The drain's asker is the change just before the one that left drain pending.
    asked = f"e.source_state = '{DRAIN_PENDING}' AND LAG(e.id) OVER w IS NOT NULL"
    sql = f"""
        WITH changes AS (
            SELECT e.node_id, e.id, e.created, e.source_state, e.target_state,
                   LEAD(e.created) OVER w AS left_at,
                   ROW_NUMBER() OVER w AS seq,
                   SUM(CASE WHEN e.source_state IN {serving} AND e.target_state NOT IN {serving} THEN 1 ELSE 0 END)
                       OVER w AS outage,
                   CASE WHEN {asked} THEN LAG(e.id) OVER w ELSE e.id END AS init_id,
                   CASE WHEN {asked} THEN LAG(e.actor_kind) OVER w ELSE e.actor_kind END AS init_kind,
                   CASE WHEN {asked} THEN LAG(e.actor_name) OVER w ELSE e.actor_name END AS init_name
            FROM {event} e
            WHERE {" AND ".join(where)}
            WINDOW w AS (PARTITION BY e.node_id ORDER BY e.created, e.id)
        )"""
    return sql, params


def _clipped(start: str, end: str) -> str:
    """Seconds from ``start`` to ``end`` (NULL: the period's end) inside the period."""
    return _later("0", _seconds(_later(start, "%(since)s"), f"COALESCE({end}, %(until)s)"))


def _derived_sql(scope: Scope, since: datetime, until: datetime) -> tuple[str, dict[str, Any]]:
    """The ``outages`` CTE: per outage begun from ``LOOKBACK`` before the period to its end, the
    node, start, end (NULL: still out at ``until``), first entry into the hardware states, the
    initiating change and its actor, derived from the state changes.

    An outage's rows are its opening change (from serving), visits to remediation, repair or RMA,
    its end (back to serving, or out of the fleet), and changes after it until the next outage
    (a drain asked for: serving to serving), which the CASEs ignore."""
    cte, params = _changes_cte(scope, since, until)
    serving, hardware, gone = _sql_list(SERVING), _sql_list(HARDWARE_STATES), _sql_list(GONE)
    opener = f"source_state IN {serving} AND target_state NOT IN {serving}"
    closer = f"(source_state NOT IN {serving} AND target_state IN {serving}) OR target_state IN {gone}"
    sql = f"""{cte},
        outages AS (
            SELECT node_id, outage,
                   MIN(CASE WHEN {opener} THEN created END) AS started,
                   MIN(CASE WHEN {closer} THEN created END) AS ended,
                   MIN(CASE WHEN target_state IN {hardware} THEN created END) AS hardware_at,
                   MAX(CASE WHEN {opener} THEN init_id END) AS init_id,
                   MAX(CASE WHEN {opener} THEN init_kind END) AS init_kind,
                   MAX(CASE WHEN {opener} THEN init_name END) AS init_name
            FROM changes
            WHERE outage > 0
            GROUP BY node_id, outage
        )"""
    return sql, params


def _attributed(source: str, extra: str = "") -> str:
    """The ``attributed`` CTE over ``source`` (outages with ``ended`` before ``until`` or NULL):
    those overlapping the period, with their seconds in it and their attribution."""
    requested = _sql_list(REQUESTED_COMPONENTS)
    return f"""
        attributed AS (
            SELECT node_id, started, ended, {_clipped("started", "ended")} AS seconds, init_id, init_name,{extra}
                   CASE WHEN hardware_at IS NOT NULL OR (init_kind = 'system' AND init_name NOT IN {requested})
                        THEN '{Attribution.PROVIDER.value}' ELSE '{Attribution.CUSTOMER.value}' END AS attribution
            FROM {source}
            WHERE ended IS NULL OR ended > %(since)s
        )"""


def _live_outages_sql(scope: Scope, since: datetime, until: datetime) -> tuple[str, dict[str, Any]]:
    """Per outage overlapping the period, computed from the state changes at each call (the
    reference that the stored rows must match)."""
    sql, params = _derived_sql(scope, since, until)
    return f"{sql},{_attributed('outages')}", params


def _outages_sql(
    scope: Scope, since: datetime, until: datetime, *, cluster: bool = False, block: Block | None = None
) -> tuple[str, dict[str, Any]]:
    """Per outage overlapping the period: node, start, end (NULL: still out), seconds in the
    period, attribution, the initiating change and its actor; read from the ``Outage`` rows, cut
    at ``until`` as the state changes would be (an end or a visit to repair after the period's end
    is not known yet), and limited to outages begun from ``LOOKBACK`` before the period like them."""
    table = models.Outage._meta.db_table
    params: dict[str, Any] = {"since": _ts(since), "until": _ts(until), "lower": _ts(since - LOOKBACK)}
    where = ["o.started >= %(lower)s", "o.started < %(until)s", "(o.ended IS NULL OR o.ended > %(since)s)"]
    where += _scope_sql("o", scope, params)
    if block is not None:
        params.update(block_start=_ts(block.start), block_end=_ts(block.end))
        # Inside: begun and over within the block. Outside, each arm is an index's range (started,
        # ended; IS NULL is indexed too), so only the outages around the block's edges are read.
        where.append(
            "o.started >= %(block_start)s AND o.ended < %(block_end)s"
            if block.inside
            else "((o.started >= %(lower)s AND o.started < %(block_start)s) OR o.ended IS NULL"
            " OR o.ended >= %(block_end)s)"
        )
    sql = f"""
        WITH stored AS (
            SELECT o.node_id, o.started,
                   CASE WHEN o.ended < %(until)s THEN o.ended END AS ended,
                   CASE WHEN o.hardware_at < %(until)s THEN o.hardware_at END AS hardware_at,
                   o.initiating_event_id AS init_id, o.init_kind, o.init_name, o.cluster_id
            FROM {table} o
            WHERE {" AND ".join(where)}
        ),{_attributed("stored", " cluster_id," if cluster else "")}"""
    return sql, params


# All of a node's history: the bounds of the rewrite (any instant a deployment will ever record).
HISTORY = (datetime(1971, 1, 1, tzinfo=UTC), datetime(3000, 1, 1, tzinfo=UTC))


def rebuild(node_ids: Sequence[int] | None = None) -> int:
    """Rewrite the ``Outage`` rows of these nodes (None: every node) from their whole history: one
    DELETE and one INSERT ... SELECT. Idempotent. Returns the rows written."""
    table = models.Outage._meta.db_table
    scope = Scope(node_ids=node_ids)
    derived, params = _derived_sql(scope, *HISTORY)
    insert = (
        f"INSERT INTO {table} (node_id, started, ended, hardware_at, initiating_event_id, init_kind, init_name,"
        f" cluster_id) {derived} SELECT o.node_id, o.started, o.ended, o.hardware_at, o.init_id, o.init_kind,"
        f" o.init_name, n.cluster_id FROM outages o JOIN {Node._meta.db_table} n ON n.id = o.node_id"
    )
    delete = f"DELETE FROM {table}"
    if node_ids is not None:
        if not node_ids:
            return 0
        delete += " WHERE node_id IN (" + ", ".join(str(int(pk)) for pk in node_ids) + ")"
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql" and node_ids is None:
            cursor.execute("SELECT set_config('work_mem', %s, true)", ["256MB"])
        cursor.execute(delete)
        cursor.execute(insert, params)
        written: int = cursor.rowcount  # the DB-API cursor is Any to mypy
        if node_ids is None:
            # A rebuild of every node follows a bulk load, whose rows no save announced: the cached
            # figures of settled days are retired with it (settled imports this module).
            from .settled import forget

            forget()
        return written


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run one report statement. On PostgreSQL, inside a transaction that lets its sort stay in
    memory (the default 4 MB spills a 90-day window of a big fleet to disk) and skips JIT
    compilation (tens of ms for a statement that runs once)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT set_config('work_mem', %s, true), set_config('jit', 'off', true)", [WORK_MEM])
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()  # the DB-API cursor is Any to mypy
        return rows


@dataclass(frozen=True)
class Outage:
    """One outage of one node, as far as it overlaps the period."""

    node_id: int
    started: datetime
    ended: datetime | None  # None: still out at the period's end
    seconds: float  # inside the period
    attribution: str
    initiated_by: str
    initiating_event_id: int


def outages(
    scope: Scope, since: datetime, until: datetime, *, limit: int | None = None, offset: int = 0, live: bool = False
) -> list[Outage]:
    """The scope's outages overlapping the period, newest first (a page of them with ``limit``).
    ``live``: derived from the state changes now instead of read from the rows (the reference)."""
    sql, params = (_live_outages_sql if live else _outages_sql)(scope, since, until)
    sql += (
        " SELECT node_id, started, ended, seconds, attribution, init_name, init_id FROM attributed"
        " ORDER BY started DESC, node_id"
    )
    if limit is not None:
        sql += " LIMIT %(limit)s OFFSET %(offset)s"
        params = {**params, "limit": limit, "offset": offset}
    return [
        Outage(
            node_id,
            _dt(started),
            _dt(ended) if ended is not None else None,
            float(seconds or 0),
            attribution,
            name or "",
            init_id,
        )
        for node_id, started, ended, seconds, attribution, name, init_id in _fetch(sql, params)
    ]


@dataclass(frozen=True)
class OutagePage:
    """A page of outages, newest first, and the totals of all of them per attribution."""

    rows: list[Outage]
    totals: dict[str, tuple[int, float]]  # attribution -> (outages, seconds in the period)

    @property
    def count(self) -> int:
        return sum(n for n, _ in self.totals.values())


def outage_page(scope: Scope, since: datetime, until: datetime, *, limit: int, offset: int) -> OutagePage | None:
    """One page of the scope's outages and the totals over all of them, in ONE statement (window
    aggregates over the whole set, computed before the LIMIT). None when the page is past the end
    (no row carries the totals)."""
    sql, params = _outages_sql(scope, since, until)
    per = ", ".join(
        f"SUM(CASE WHEN attribution = '{a}' THEN 1 ELSE 0 END) OVER (), "
        f"SUM(CASE WHEN attribution = '{a}' THEN seconds ELSE 0 END) OVER ()"
        for a in Attribution.values
    )
    sql += (
        f" SELECT node_id, started, ended, seconds, attribution, init_name, init_id, {per} FROM attributed"
        " ORDER BY started DESC, node_id LIMIT %(limit)s OFFSET %(offset)s"
    )
    rows = _fetch(sql, {**params, "limit": limit, "offset": offset})
    if not rows:
        return None
    sums = rows[0][7:]
    totals = {a: (int(sums[2 * i] or 0), float(sums[2 * i + 1] or 0)) for i, a in enumerate(Attribution.values)}
    return OutagePage(
        [
            Outage(
                node_id,
                _dt(started),
                _dt(ended) if ended is not None else None,
                float(seconds or 0),
                attribution,
                name or "",
                init_id,
            )
            for node_id, started, ended, seconds, attribution, name, init_id, *_ in rows
        ],
        totals,
    )


def count_outages(scope: Scope, since: datetime, until: datetime) -> int:
    sql, params = _outages_sql(scope, since, until)
    return int(_fetch(sql + " SELECT COUNT(*) FROM attributed", params)[0][0])


@dataclass(frozen=True)
class Block:
    """Days inside a period (``reports.settled``): the outages begun and over within them
    (``inside``), whose figures do not depend on the period around them, or all the others."""

    start: datetime
    end: datetime
    inside: bool


def downtime_by_attribution(
    scope: Scope, since: datetime, until: datetime, *, block: Block | None = None
) -> list[dict[str, Any]]:
    """Per cluster (id; None for none) and attribution: outages and node-seconds of downtime in the period
    (of the outages inside or outside ``block`` only, when given).
    The cluster is the row's copy of the node's (no join of tens of thousands of outages to the nodes)."""
    sql, params = _outages_sql(scope, since, until, cluster=True, block=block)
    sql += (
        " SELECT cluster_id, attribution, COUNT(*), SUM(seconds) FROM attributed"
        " GROUP BY cluster_id, attribution ORDER BY cluster_id, attribution"
    )
    return [
        {"cluster_id": cluster_id, "attribution": attribution, "outages": int(n), "seconds": float(seconds or 0)}
        for cluster_id, attribution, n, seconds in _fetch(sql, params)
    ]


@dataclass(frozen=True)
class ServingTime:
    """A node's seconds in production in the period, from its state changes, and the state it was
    in before the first change read (``None``: no change read before the period's end)."""

    seconds: float
    first_change_at: datetime | None
    state_before: str | None


def serving_seconds(node_ids: Sequence[int], since: datetime, until: datetime) -> dict[int, ServingTime]:
    """Per node of a page: time in the serving states inside the period, counted from its changes
    (the stay before the first change read is the caller's: see ``availability``)."""
    cte, params = _changes_cte(Scope(node_ids=node_ids), since, until)
    sql = f"""{cte}
        SELECT node_id, SUM(CASE WHEN target_state IN {_sql_list(SERVING)} THEN {_clipped("created", "left_at")}
                                 ELSE 0 END),
               MIN(created), MAX(CASE WHEN seq = 1 THEN source_state END)
        FROM changes GROUP BY node_id"""
    return {
        node_id: ServingTime(float(seconds or 0), _dt(first), state)
        for node_id, seconds, first, state in _fetch(sql, params)
    }


def _dt(value: Any) -> datetime:
    """Raw SQL answers timestamps as datetimes on PostgreSQL, and on SQLite as text (UTC), or as naive
    datetimes (UTC) for a column read as it is stored."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"Not a timestamp: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
