"""What the daily evaluation reads, a batch of nodes at a time, with a fixed number of
queries per batch (never one per node): active checks' figures, daily telemetry roll-ups
(the database groups 30-second samples by node and day), and the lemon signals counted
per node in SQL.

Batches are contiguous ranges of node ids, so every query filters ``node_id BETWEEN lo AND
hi`` and walks the (node, time) indexes the history tables already have.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet

from checks.workloads import DEFAULT_WORKLOAD
from health.choices import RecommendedAction
from health.models import XidDefinition
from health.xid import APPLICATION_XIDS
from nodes.choices import ACTIVE_KINDS, STAGE_KINDS, STATE_PHASE, EventKind, NodeState, Phase, RunKind, RunStatus
from nodes.models import Node, NodeEvent, Run
from remediation.models import Remediation
from repairs.choices import RmaState, TicketState
from repairs.models import RepairTicket, RmaCase
from telemetry import packing, retention
from telemetry.models import LOAD_UTILIZATION_PCT, GpuSample, GpuSampleDaily, GpuSampleHourly, XidRecord

DAY = 86400
LOAD_PCT = LOAD_UTILIZATION_PCT  # "comparable load": temperature is compared only while the GPU is this busy
# Active-check figures a trend or a peer comparison reads: (run kind, key in Run.figures).
CHECK_FIGURES: dict[str, tuple[str, str]] = {
    "nccl_busbw_gbps": (RunKind.NCCL_TEST, "busbw_gbps"),
    "gpu_min_tflops": (RunKind.GPU_STRESS, "min_tflops"),
    "training_samples_per_s": (RunKind.TRAINING_STEP, "samples_per_s"),
}
# Only runs with the default parameters (checks.specs; the Day 1 burn-in uses them) are compared:
# bus bandwidth depends on the message size and GPU count, TFLOP/s on the data type and matrix.
NCCL_MAX_BYTES = 8 * 1024**3
STRESS_DTYPE, STRESS_MATRIX = "bf16", 8192


def comparable(kind: str, params: dict[str, Any] | None, gpu_count: int) -> bool:
    """Was the run made with the parameters every node's runs are compared at?"""
    params = params or {}
    same: bool  # the parameters are JSON values: Any to mypy
    if kind == RunKind.NCCL_TEST:
        same = params.get("max_bytes", NCCL_MAX_BYTES) == NCCL_MAX_BYTES and params.get("gpus", gpu_count) == gpu_count
    elif kind == RunKind.TRAINING_STEP:
        # One line per node: the default workload (what the freshness scheduler requests).
        same = params.get("workload", DEFAULT_WORKLOAD) == DEFAULT_WORKLOAD
    else:
        same = (
            params.get("dtype", STRESS_DTYPE) == STRESS_DTYPE
            and params.get("matrix_size", STRESS_MATRIX) == STRESS_MATRIX
        )
    return same


@dataclass(frozen=True)
class NodeRow:
    pk: int
    hostname: str
    profile_id: int
    profile: str
    gpu_count: int
    state: str


@dataclass
class Batch:
    """One batch's inputs. ``series``: (node, figure) -> [(time, value)], oldest first;
    ``lemon``: node -> raw signal inputs (counts, incident times, state changes)."""

    series: dict[tuple[int, str], list[tuple[datetime, float]]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    incidents: dict[int, list[datetime]] = field(default_factory=lambda: defaultdict(list))
    changes: dict[int, list[tuple[datetime, str, str]]] = field(default_factory=lambda: defaultdict(list))


def nodes() -> list[NodeRow]:
    """Every node still in the fleet, by id (one query)."""
    rows = (
        Node.objects.exclude(state=NodeState.DECOMMISSIONED)
        .order_by("pk")
        .values_list(
            "pk", "hostname", "hardware_profile_id", "hardware_profile__name", "hardware_profile__gpu_count", "state"
        )
    )
    return [NodeRow(*row) for row in rows]


def application_xids() -> list[int]:
    """XIDs blamed on the application, not the node: those the catalog sends to the application
    (13, 31, ...) and 43/45, which NVIDIA blames on it but asks no action for (unless an
    operator gave them one)."""
    blamed = Q(recommended_action=RecommendedAction.CHECK_APPLICATION) | Q(
        xid__in=APPLICATION_XIDS, recommended_action=RecommendedAction.NONE
    )
    return list(XidDefinition.objects.filter(blamed).values_list("xid", flat=True))


def read_batch(
    rows: Sequence[NodeRow], *, now: datetime, trend_since: datetime, lemon_since: datetime, app_xids: list[int]
) -> Batch:
    """Everything the evaluation needs about ``rows`` (contiguous by id), in a fixed number of queries."""
    batch = Batch()
    lo, hi = rows[0].pk, rows[-1].pk
    _check_figures(batch, lo, hi, trend_since, now, {row.pk: row.gpu_count for row in rows})
    _telemetry(batch, lo, hi, trend_since, now)
    batch.counts = {
        "xids": _count(
            XidRecord.objects.filter(kind="xid").exclude(xid__in=app_xids), "observed_at", lo, hi, lemon_since, now
        ),
        "tickets": _count(
            RepairTicket.objects.exclude(state=TicketState.CANCELLED), "created", lo, hi, lemon_since, now
        ),
        "rmas": _count(RmaCase.objects.exclude(state=RmaState.CANCELLED), "created", lo, hi, lemon_since, now),
        "failed_checks": _count(
            Run.objects.filter(kind__in=(*ACTIVE_KINDS, *STAGE_KINDS), status=RunStatus.FAILED),
            "created",
            lo,
            hi,
            lemon_since,
            now,
        ),
    }
    for node_id, created in (
        Remediation.objects.filter(node_id__gte=lo, node_id__lte=hi, created__gte=lemon_since, created__lte=now)
        .order_by()
        .values_list("node_id", "created")
    ):
        batch.incidents[node_id].append(created)
    for node_id, created, source, target in (
        NodeEvent.objects.filter(
            node_id__gte=lo,
            node_id__lte=hi,
            created__gte=lemon_since,
            created__lte=now,
            kind__in=(EventKind.TRANSITION, EventKind.FORCED),
        )
        .order_by("node_id", "created", "id")
        .values_list("node_id", "created", "source_state", "target_state")
    ):
        batch.changes[node_id].append((created, source, target))
    return batch


def _count(
    queryset: QuerySet[Any], time_field: str, lo: int, hi: int, since: datetime, until: datetime
) -> dict[int, int]:
    """Rows per node in the window, counted by the database (GROUP BY node)."""
    rows = (
        queryset.filter(node_id__gte=lo, node_id__lte=hi, **{f"{time_field}__gte": since, f"{time_field}__lte": until})
        .order_by()
        .values("node_id")
        .annotate(n=Count("node_id"))
        .values_list("node_id", "n")
    )
    return dict(rows)


def _check_figures(
    batch: Batch, lo: int, hi: int, since: datetime, until: datetime, gpu_counts: dict[int, int]
) -> None:
    by_kind = {kind: (figure, key) for figure, (kind, key) in CHECK_FIGURES.items()}
    runs = (
        Run.objects.filter(
            node_id__gte=lo,
            node_id__lte=hi,
            kind__in=list(by_kind),
            status__in=(RunStatus.PASSED, RunStatus.FAILED),
            finished__gte=since,
            finished__lte=until,
        )
        .order_by("node_id", "finished", "id")
        .values_list("node_id", "kind", "finished", "figures", "params")
    )
    for node_id, kind, finished, figures, params in runs:
        # finished is never None here (finished__lte above); the check narrows it for mypy.
        if finished is None or node_id not in gpu_counts or not comparable(kind, params, gpu_counts[node_id]):
            continue
        figure, key = by_kind[kind]
        value = (figures or {}).get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            batch.series[(node_id, figure)].append((finished, float(value)))


# --- Telemetry: one row per node and day, from raw samples, hourly and daily roll-ups ------------


def _day(column: str) -> str:
    """Whole days since the epoch of a timestamp column."""
    if connection.vendor == "postgresql":
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {column}) / {DAY}) AS BIGINT)"
    # SQLite: integer division floors positive epochs; '%%' because Django turns %s into ?.
    return f"(CAST(strftime('%%s', {column}) AS INTEGER) / {DAY})"


# Per GPU and day first (the counters' maximum, the busy samples' temperatures), then per node
# and day: counters add up over GPUs, temperatures average over busy samples.
_INNER = {
    "raw": (
        "collected_at",
        "MAX(ecc_aggregate_corrected)",
        "MAX(COALESCE(remapped_rows_correctable, 0) + COALESCE(remapped_rows_uncorrectable, 0))",
        f"SUM(CASE WHEN utilization_pct >= {LOAD_PCT} THEN temperature_c END)",
        f"SUM(CASE WHEN utilization_pct >= {LOAD_PCT} AND temperature_c IS NOT NULL THEN 1 ELSE 0 END)",
    ),
    # An hourly row counts its samples under load one by one, as the raw rows do (rows rolled up before
    # it did: the whole hour, if its average utilisation was busy enough).
    "hourly": (
        "hour",
        "MAX(ecc_aggregate_corrected_max)",
        "MAX(COALESCE(remapped_rows_correctable_max, 0) + COALESCE(remapped_rows_uncorrectable_max, 0))",
        f"SUM({retention.HOURLY_LOAD_TEMPERATURE_SUM})",
        f"SUM({retention.HOURLY_LOAD_N})",
    ),
    # A daily row holds what the hourly rows above would give: the counters' maxima (cumulative, so
    # the day's maximum of the sum is the sum of its maxima) and the hours under load kept apart.
    "daily": (
        "day",
        "MAX(ecc_aggregate_corrected_max)",
        "MAX(COALESCE(remapped_rows_correctable_max, 0) + COALESCE(remapped_rows_uncorrectable_max, 0))",
        "SUM(load_temperature_avg * load_n)",
        "SUM(CASE WHEN load_temperature_avg IS NOT NULL THEN load_n ELSE 0 END)",
    ),
}


def _telemetry(batch: Batch, lo: int, hi: int, since: datetime, until: datetime) -> None:
    days: dict[tuple[int, int], list[float | None]] = {}
    # Raw rows for the hours not packed yet, the hourly roll-up of every packed hour (made when it was
    # packed, with what the trends read of it: no pack is decoded), daily rows for the days past the
    # hourly window. Daily rows replace the hourly rows they roll up and an hour's raw rows go when it
    # is packed, so no hour is read twice (a report arriving late for a packed hour is raw until the
    # next packing run merges it, as it was when packs were read).
    floor = packing.raw_floor(until)
    before_floor = floor - timedelta(microseconds=1)
    parts = [
        _daily("raw", GpuSample._meta.db_table, lo, hi, since, until),
        _daily("hourly", GpuSampleHourly._meta.db_table, lo, hi, since, until),
        _daily("daily", GpuSampleDaily._meta.db_table, lo, hi, since, before_floor) if since < floor else [],
    ]
    for part in parts:
        for node_id, day, ecc, rows, tsum, tn in part:
            seen = days.setdefault((node_id, day), [None, None, 0.0, 0.0])
            # The day at a raw/hourly/daily boundary comes from two tables: counters take the larger.
            seen[0] = _max(seen[0], ecc)
            seen[1] = _max(seen[1], rows)
            seen[2] = (seen[2] or 0.0) + float(tsum or 0.0)
            seen[3] = (seen[3] or 0.0) + float(tn or 0.0)
    for (node_id, day), (ecc, rows, tsum, tn) in sorted(days.items()):
        at = datetime.fromtimestamp(day * DAY + DAY // 2, tz=UTC)  # the day's middle
        if ecc is not None:
            batch.series[(node_id, "ecc_corrected")].append((at, float(ecc)))
        if rows is not None:
            batch.series[(node_id, "remapped_rows")].append((at, float(rows)))
        if tn:
            batch.series[(node_id, "temperature_at_load")].append((at, float(tsum or 0.0) / float(tn)))


def _max(a: float | None, b: Any) -> float | None:
    if b is None:
        return a
    return float(b) if a is None else max(a, float(b))


def _daily(table: str, db_table: str, lo: int, hi: int, since: datetime, until: datetime) -> list[tuple[Any, ...]]:
    time_column, ecc, rows, tsum, tn = _INNER[table]
    sql = (
        f"SELECT node_id, d, SUM(ecc), SUM(rws), SUM(tsum), SUM(tn) FROM ("  # noqa: S608 - _INNER's constant SQL and a table name; values are parameters
        f"SELECT node_id, gpu_index, {_day(time_column)} AS d, {ecc} AS ecc, {rows} AS rws, {tsum} AS tsum, "
        f"{tn} AS tn FROM {db_table} WHERE node_id >= %s AND node_id <= %s AND {time_column} >= %s "
        f"AND {time_column} <= %s GROUP BY node_id, gpu_index, d) per_gpu GROUP BY node_id, d"
    )
    if table == "daily":  # a day reaching into the window counts, as its hours in the window would
        since = since.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(sql, [lo, hi, adapt(since), adapt(until)])
        per_day: list[tuple[Any, ...]] = cursor.fetchall()  # the DB-API cursor is Any to mypy
        return per_day


# --- State changes -> time out of production --------------------------------------------------------


def out_flag(state: str) -> bool | None:
    """True: out of production; False: in production (or gone); None: Day 0/1, no change."""
    phase = STATE_PHASE.get(state)
    if phase == Phase.OUT:
        return True
    if phase in (Phase.PRODUCTION, Phase.RETIRED):
        return False
    return None


def window_start_out(current_state: str, changes: list[tuple[datetime, str, str]]) -> bool:
    """Was the node out of production when the window began? The first change's source state
    says where it was; with no change in the window it has been in its current state throughout."""
    state = changes[0][1] if changes else current_state
    return out_flag(state) is True


def hours_since(at: datetime, start: datetime) -> float:
    return (at - start) / timedelta(hours=1)
