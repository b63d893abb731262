"""Retention: raw GPU samples become hourly roll-ups, old hours daily ones, old history is pruned.

Work is cut into bounded batches (one hour of samples of at most NODE_CHUNK nodes; one
day of old rows) and each batch commits on its own, so a run can stop anywhere and the
next one carries on. Rolling up and deleting the same rows share a transaction, and
a roll-up into an hour that already has one merges (weighted by ``n``): running it
twice, or over late rows of an old hour, never counts a sample twice. Hours past
TELEMETRY_HOURLY_RETENTION_DAYS become days the same way (one day of at most NODE_CHUNK nodes
per batch, roll-up and delete in one transaction, merged by weight), so no hour ages out
without its day holding it; only days are pruned, past TELEMETRY_DAILY_RETENTION_DAYS.

On a partitioned database (``manage.py telemetry_partitioning``) whole month partitions past
their window are dropped first (``partitioning.drop_expired_partitions``), far cheaper than
deleting their rows; the deletes then only see the rest of the window's edge month.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Model, QuerySet
from django.utils import timezone

from . import partitioning
from .models import (
    LOAD_UTILIZATION_PCT,
    GpuSample,
    GpuSampleDaily,
    GpuSampleHourly,
    NodeReport,
    TelemetryHourPack,
    XidIdentity,
    XidRecord,
)

log = logging.getLogger(__name__)

NODE_CHUNK = 500
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

# hourly column -> (aggregate over raw rows, how to merge with an existing hourly row)
_ROLLUP = {
    "temperature_avg": ("AVG(temperature_c)", "avg"),
    "temperature_max": ("MAX(temperature_c)", "max"),
    "hbm_temperature_max": ("MAX(hbm_temperature_c)", "max"),
    "power_avg": ("AVG(power_w)", "avg"),
    "power_max": ("MAX(power_w)", "max"),
    "utilization_avg": ("AVG(utilization_pct)", "avg"),
    "memory_used_max": ("MAX(memory_used_mib)", "max"),
    **{
        f"{c}_max": (f"MAX({c})", "max")
        for c in (
            "ecc_volatile_corrected",
            "ecc_volatile_uncorrected",
            "ecc_aggregate_corrected",
            "ecc_aggregate_uncorrected",
            "remapped_rows_correctable",
            "remapped_rows_uncorrectable",
            "nvlink_crc_errors",
            "nvlink_replay_errors",
            "nvlink_recovery_errors",
            "pcie_replay_count",
        )
    },
    "pcie_link_gen_min": ("MIN(pcie_link_gen)", "min"),
    "pcie_link_width_min": ("MIN(pcie_link_width)", "min"),
}


@dataclass
class RetentionResult:
    """Rows moved or removed by one run, per table."""

    rolled_up: int = 0
    rolled_up_hours: int = 0  # hourly rows that became daily ones
    deleted: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    finished: bool = True


def roll_up_and_prune(*, now: datetime | None = None, max_batches: int = 200) -> RetentionResult:
    """Roll raw samples past TELEMETRY_RAW_RETENTION_DAYS into hours and hours past
    TELEMETRY_HOURLY_RETENTION_DAYS into days, drop whole partitions past their windows, then prune
    reports, XID records and daily roll-ups past their own windows. At most ``max_batches`` batches."""
    now = now or timezone.now()
    result = RetentionResult()
    budget = [max_batches]
    raw_cutoff = (now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS)).replace(
        minute=0, second=0, microsecond=0
    )  # whole hours only: an hour is never half raw, half rolled
    while budget[0] > 0 and (hour := _oldest_hour(raw_cutoff)) is not None:
        result.rolled_up += _roll_up_hour(hour, budget)
    hourly_cutoff = (now - timedelta(days=settings.TELEMETRY_HOURLY_RETENTION_DAYS)).astimezone(UTC)
    hourly_cutoff = hourly_cutoff.replace(hour=0, minute=0, second=0, microsecond=0)  # whole UTC days only
    while budget[0] > 0 and (day := _oldest_day(hourly_cutoff)) is not None:
        result.rolled_up_hours += _roll_up_day(day, budget)
    result.dropped = partitioning.drop_expired_partitions(now)
    for model, column, name in (
        (NodeReport, "collected_at", "TELEMETRY_REPORT_RETENTION_DAYS"),
        (XidRecord, "observed_at", "TELEMETRY_XID_RETENTION_DAYS"),
        # An event's identity goes with its line: resent later, it is new again.
        (XidIdentity, "observed_at", "TELEMETRY_XID_RETENTION_DAYS"),
        # Hours are not pruned: past their window they become days (above), which are.
        (GpuSampleDaily, "day", "TELEMETRY_DAILY_RETENTION_DAYS"),
    ):
        cutoff = now - timedelta(days=getattr(settings, name))
        # The model_name (the stubs call _meta.model_name Optional; it is the lowered class name).
        result.deleted[model.__name__.lower()] = _prune(model, column, cutoff, budget)
    # Packed hours (telemetry.packing; their roll-ups were made when packed) hold samples and reports:
    # kept for the longer of the two windows (the same by default). Readers take samples from packs
    # within the raw window only.
    days = max(settings.TELEMETRY_RAW_RETENTION_DAYS, settings.TELEMETRY_REPORT_RETENTION_DAYS)
    pack_cutoff = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
    result.deleted["telemetryhourpack"] = _prune(TelemetryHourPack, "hour", pack_cutoff, budget)
    result.finished = budget[0] > 0
    log.info("telemetry retention: %s", result)
    return result


def _oldest_hour(cutoff: datetime) -> datetime | None:
    oldest = GpuSample.objects.filter(collected_at__lt=cutoff).aggregate(t=Min("collected_at"))["t"]
    return oldest.replace(minute=0, second=0, microsecond=0) if oldest else None


def _roll_up_hour(hour: datetime, budget: list[int]) -> int:
    """Roll one hour of raw samples into hourly rows and delete them, NODE_CHUNK nodes per batch."""
    rows = GpuSample.objects.filter(collected_at__gte=hour, collected_at__lt=hour + HOUR)
    return _move_in_chunks(rows, lambda lo, hi: _insert_rollup(hour, lo, hi), budget)


def _move_in_chunks(rows: QuerySet[Any], roll_up: Callable[[int, int], None], budget: list[int]) -> int:
    """``roll_up`` then delete ``rows`` of NODE_CHUNK nodes at a time, one transaction each, while the
    batch budget lasts; returns the rows deleted."""
    bounds = rows.aggregate(lo=Min("node_id"), hi=Max("node_id"))
    moved = 0
    start = bounds["lo"]
    while start is not None and start <= bounds["hi"] and budget[0] > 0:
        with transaction.atomic():
            roll_up(start, start + NODE_CHUNK)
            moved += rows.filter(node_id__gte=start, node_id__lt=start + NODE_CHUNK).delete()[0]
        budget[0] -= 1
        start += NODE_CHUNK
    return moved


def _insert_rollup(hour: datetime, node_from: int, node_to: int) -> None:
    _roll_into(GpuSampleHourly, "hour", hour, HOUR, GpuSample, "collected_at", "COUNT(*)", _HOURLY, node_from, node_to)


def _roll_into(
    model: type[Model],
    key: str,
    at: datetime,
    span: timedelta,
    source: type[Model],
    time_column: str,
    count: str,
    columns: dict[str, tuple[str, str, str]],
    node_from: int,
    node_to: int,
) -> None:
    """Roll ``source``'s rows of [at, at + span) of nodes in [node_from, node_to) into one ``model`` row
    per node and GPU keyed by ``at`` (``key``); a row already there merges (``_merge_weighted``).
    ``columns``: column -> (aggregate over the source rows, how it merges, the count it is weighed by)."""
    table, rows = model._meta.db_table, source._meta.db_table
    aggregates = ", ".join(agg for agg, _, _ in columns.values())
    # Every merge reads the row as it was (``table.col``): an average weighs by the old count.
    merges = ", ".join(f"{c} = {_merge_weighted(table, c, how, weight)}" for c, (_, how, weight) in columns.items())
    sql = (
        f"INSERT INTO {table} (node_id, {key}, gpu_index, n, {', '.join(columns)}) "  # noqa: S608 - table and column names of this module; values are parameters
        f"SELECT node_id, %s, gpu_index, {count}, {aggregates} FROM {rows} "
        f"WHERE {time_column} >= %s AND {time_column} < %s AND node_id >= %s AND node_id < %s "
        f"GROUP BY node_id, gpu_index "
        f"ON CONFLICT (node_id, {key}, gpu_index) DO UPDATE SET n = {table}.n + EXCLUDED.n, {merges}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(at), adapt(at), adapt(at + span), node_from, node_to])


def _merge(table: str, column: str, how: str) -> str:
    """SQL merging an existing hourly value with the incoming one; NULL means "not reported"."""
    old, new = f"{table}.{column}", f"EXCLUDED.{column}"
    if how == "avg":
        both = f"({old} * {table}.n + {new} * EXCLUDED.n) / ({table}.n + EXCLUDED.n)"
    elif connection.vendor == "postgresql":
        both = f"{'GREATEST' if how == 'max' else 'LEAST'}({old}, {new})"
    else:
        both = f"{how.upper()}({old}, {new})"  # SQLite's two-argument MAX/MIN
    return f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {both} END"


# The hour's samples under load (raw rows: sample by sample), what the trends compare temperatures of.
_BUSY_SAMPLE = f"utilization_pct >= {LOAD_UTILIZATION_PCT} AND temperature_c IS NOT NULL"
# hourly column -> (aggregate over raw samples, how it merges with an existing hourly row, its weight)
_HOURLY = {
    **{column: (aggregate, how, "n") for column, (aggregate, how) in _ROLLUP.items()},
    # An hour rolled up before these were counted keeps load_n NULL (NULL + n): readers fall back.
    "load_n": (f"SUM(CASE WHEN {_BUSY_SAMPLE} THEN 1 ELSE 0 END)", "sum", "n"),
    "load_temperature_avg": (f"AVG(CASE WHEN {_BUSY_SAMPLE} THEN temperature_c END)", "avg", "load_n"),
}


_LOADED = f"utilization_avg >= {LOAD_UTILIZATION_PCT} AND temperature_avg IS NOT NULL"
# An hourly row's samples under load and their temperatures' sum (trends.collect, the daily roll-up):
# counted sample by sample since the hourly row has them (load_n), else the whole hour if its
# average utilisation was busy enough.
HOURLY_LOAD_N = f"(CASE WHEN load_n IS NOT NULL THEN load_n WHEN {_LOADED} THEN n ELSE 0 END)"
HOURLY_LOAD_TEMPERATURE_SUM = (
    f"(CASE WHEN load_n IS NOT NULL THEN load_temperature_avg * load_n WHEN {_LOADED} THEN temperature_avg * n END)"
)
# daily column -> (aggregate over hourly rows, how to merge with an existing daily row, its weight)
_DAILY = {
    **{
        column: (
            f"SUM({column} * n) / SUM(CASE WHEN {column} IS NOT NULL THEN n END)"
            if how == "avg"
            else f"{how.upper()}({column})",
            how,
            "n",
        )
        for column, (_, how) in _ROLLUP.items()
    },
    # Temperature under load: the hourly rows' samples under load (trends.collect reads these two alone).
    "load_n": (f"SUM({HOURLY_LOAD_N})", "sum", "n"),
    "load_temperature_avg": (
        f"SUM({HOURLY_LOAD_TEMPERATURE_SUM}) / NULLIF(SUM({HOURLY_LOAD_N}), 0)",
        "avg",
        "load_n",
    ),
}


def _oldest_day(cutoff: datetime) -> datetime | None:
    oldest = GpuSampleHourly.objects.filter(hour__lt=cutoff).aggregate(t=Min("hour"))["t"]
    return oldest.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) if oldest else None


def _roll_up_day(day: datetime, budget: list[int]) -> int:
    """Roll one UTC day of hourly rows into daily rows and delete them, NODE_CHUNK nodes per batch."""
    rows = GpuSampleHourly.objects.filter(hour__gte=day, hour__lt=day + DAY)
    return _move_in_chunks(rows, lambda lo, hi: _insert_daily(day, lo, hi), budget)


def _insert_daily(day: datetime, node_from: int, node_to: int) -> None:
    _roll_into(GpuSampleDaily, "day", day, DAY, GpuSampleHourly, "hour", "SUM(n)", _DAILY, node_from, node_to)


def _merge_weighted(table: str, column: str, how: str, weight: str) -> str:
    """SQL merging an existing roll-up value with the incoming one: ``_merge``, averages weighted by
    ``weight`` (the samples behind them), counts added."""
    if how == "sum":
        return f"{table}.{column} + EXCLUDED.{column}"
    if how != "avg" or weight == "n":
        return _merge(table, column, how)
    old, new = f"{table}.{column}", f"EXCLUDED.{column}"
    both = f"({old} * {table}.{weight} + {new} * EXCLUDED.{weight}) / ({table}.{weight} + EXCLUDED.{weight})"
    return f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {both} END"


def _prune(model: type[Model], column: str, cutoff: datetime, budget: list[int]) -> int:
    """Delete rows older than ``cutoff``, a day of them per batch (oldest first)."""
    deleted = 0
    while budget[0] > 0:
        oldest = model._default_manager.filter(**{f"{column}__lt": cutoff}).aggregate(t=Min(column))["t"]
        if oldest is None:
            break
        with transaction.atomic():
            deleted += model._default_manager.filter(**{f"{column}__lt": min(cutoff, oldest + DAY)}).delete()[0]
        budget[0] -= 1
    return deleted
