"""Downsampled GPU time series for charts and the samples API.

The database does the bucketing (GROUP BY gpu, time bucket) so a 7-day window of
30-second samples comes back as a few hundred rows per GPU, not 20,000. Raw samples
(packed hours too: ``telemetry.packing``, bucketed here in Python as the database would),
hourly and daily roll-ups are read alike and merged, so a window reaching past the raw
retention (or the hourly one: 90 days, a year) still draws. Hourly roll-ups are read before
``packing.raw_floor`` only: a packed hour has both, and is read from its pack. Daily rows
replace hourly ones (retention deletes the hours it rolls into a day), so they are disjoint
from the hourly rows and, the hourly window being longer than the raw one, from the raw window.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from . import packing
from .models import GpuSample, GpuSampleDaily, GpuSampleHourly

MAX_POINTS_PER_FIGURE = 2000
HOUR_S = 3600
TRACES_PER_GPU = 2  # temperature: GPU + HBM; ECC: corrected + uncorrected
WINDOWS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
MAX_WINDOW = timedelta(days=400)

# (output name, raw expression, roll-up expression (hourly and daily rows alike), how two partial buckets combine)
_COLUMNS = [
    ("temperature_max", "MAX(temperature_c)", "MAX(temperature_max)", "max"),
    ("hbm_temperature_max", "MAX(hbm_temperature_c)", "MAX(hbm_temperature_max)", "max"),
    ("power_avg", "AVG(power_w)", "SUM(power_avg * n) / SUM(n)", "avg"),
    ("power_max", "MAX(power_w)", "MAX(power_max)", "max"),
    ("utilization_avg", "AVG(utilization_pct)", "SUM(utilization_avg * n) / SUM(n)", "avg"),
    ("ecc_volatile_corrected_max", "MAX(ecc_volatile_corrected)", "MAX(ecc_volatile_corrected_max)", "max"),
    ("ecc_volatile_uncorrected_max", "MAX(ecc_volatile_uncorrected)", "MAX(ecc_volatile_uncorrected_max)", "max"),
    ("ecc_aggregate_uncorrected_max", "MAX(ecc_aggregate_uncorrected)", "MAX(ecc_aggregate_uncorrected_max)", "max"),
]
FIELDS = [name for name, *_ in _COLUMNS]


@dataclass
class Series:
    """Per GPU index, the window's buckets oldest first: {"t", "n", <FIELDS>}."""

    since: datetime
    until: datetime
    bucket_s: int
    gpus: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def points(self) -> int:
        return sum(len(rows) for rows in self.gpus.values())


def bucket_seconds(since: datetime, until: datetime, gpu_count: int) -> int:
    """The bucket width that keeps a figure with TRACES_PER_GPU traces per GPU within
    MAX_POINTS_PER_FIGURE points."""
    per_trace = max(MAX_POINTS_PER_FIGURE // (TRACES_PER_GPU * max(gpu_count, 1)), 2)
    # Buckets are aligned to the epoch, not to ``since``: a window touches one bucket more
    # than it spans, hence per_trace - 1.
    return max(math.ceil((until - since).total_seconds() / (per_trace - 1)), 1)


def gpu_series(node_id: int, *, since: datetime, until: datetime, gpu_count: int, gpu: int | None = None) -> Series:
    """Bucketed temperature, power, utilisation and ECC per GPU over [since, until)."""
    bucket = bucket_seconds(since, until, 1 if gpu is not None else gpu_count)
    merged: dict[tuple[int, int], dict[str, Any]] = {}
    floor = packing.raw_floor(timezone.now())
    # Buckets of an hour or more: a packed hour's roll-up, made in the transaction that packed it, holds
    # what its bucket needs, so the chart reads the roll-ups and no pack is decoded (a 7-day chart would
    # decode 168). Finer buckets read the packs. Either way raw rows not yet packed are read as they are.
    coarse = bucket >= HOUR_S
    hourly_until = until if coarse else min(until, floor)
    parts = [
        _query("raw", "collected_at", 1, node_id, since, until, bucket, gpu),
        [] if coarse else _packed(node_id, since, until, bucket, gpu),
        _query("hourly", "hour", 2, node_id, since, hourly_until, bucket, gpu) if since < hourly_until else [],
        _query("daily", "day", 2, node_id, since, min(until, floor), bucket, gpu) if since < floor else [],
    ]
    for rows in parts:
        for row in rows:
            key = (row["gpu"], row["b"])
            merged[key] = _combine(merged[key], row) if key in merged else row
    series = Series(since=since, until=until, bucket_s=bucket)
    for (gpu_index, b), row in sorted(merged.items()):
        row["t"] = datetime.fromtimestamp(b * bucket, tz=UTC)
        series.gpus.setdefault(gpu_index, []).append({k: row[k] for k in ("t", "n", *FIELDS)})
    return series


def _bucket(column: str, bucket: int) -> str:
    """The bucket number of a timestamp: whole seconds since the epoch // bucket width."""
    if connection.vendor == "postgresql":
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {column}) / {bucket}) AS BIGINT)"
    # SQLite: integer division floors positive epochs; '%%' because Django turns %s into ?.
    return f"(CAST(strftime('%%s', {column}) AS INTEGER) / {bucket})"


def _query(
    table: str,
    time_column: str,
    index: int,
    node_id: int,
    since: datetime,
    until: datetime,
    bucket: int,
    gpu: int | None,
) -> list[dict[str, Any]]:
    model = {"raw": GpuSample, "hourly": GpuSampleHourly, "daily": GpuSampleDaily}[table]
    count = "COUNT(*)" if table == "raw" else "SUM(n)"
    selects = ", ".join(f"{cols[index]} AS {cols[0]}" for cols in _COLUMNS)
    where = f"node_id = %s AND {time_column} >= %s AND {time_column} < %s"
    params: list[Any] = [node_id, _adapt(since), _adapt(until)]
    if gpu is not None:
        where += " AND gpu_index = %s"
        params.append(gpu)
    sql = (
        f"SELECT gpu_index, {_bucket(time_column, bucket)} AS b, {count} AS n, {selects} "  # noqa: S608 - table and column names, an int bucket; values are parameters
        f"FROM {model._meta.db_table} WHERE {where} GROUP BY gpu_index, b ORDER BY gpu_index, b"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = ["gpu", "b", "n", *FIELDS]
        return [dict(zip(names, (*row[:3], *(_reading(v) for v in row[3:])), strict=True)) for row in cursor.fetchall()]


def _packed(node_id: int, since: datetime, until: datetime, bucket: int, gpu: int | None) -> list[dict[str, Any]]:
    """The raw query's rows, from the packed hours: same buckets, same aggregates (NULLs skipped,
    ``n`` counting every sample)."""
    names = sorted({raw[4:-1] for _, raw, _, _ in _COLUMNS})
    groups: dict[tuple[int, int], dict[str, list[Any]]] = {}
    for _, index, at, values in packing.packed_columns(node_id, node_id, names, since=since, until=until):
        if gpu is not None and index != gpu:
            continue
        # The instants are sorted: each bucket is a slice (a 7-day chart takes an hour's pack in one or two).
        i, end = bisect_left(at, since), bisect_left(at, until)
        while i < end:
            b = int(at[i].timestamp()) // bucket
            j = bisect_left(at, datetime.fromtimestamp((b + 1) * bucket, tz=UTC), i, end)
            group = groups.setdefault((index, b), {name: [] for name in names})
            for name in names:
                group[name] += values[name][i:j]
            i = j
    rows = []
    for (gpu_index, b), group in sorted(groups.items()):
        row: dict[str, Any] = {"gpu": gpu_index, "b": b, "n": len(group[names[0]])}
        for name, raw, _, _ in _COLUMNS:
            found = [v for v in group[raw[4:-1]] if v is not None]
            if not found:
                row[name] = None
            else:
                row[name] = _reading(max(found) if raw.startswith("MAX") else sum(found) / len(found))
        rows.append(row)
    return rows


def _reading(value: Any) -> Any:
    """A figure to the precision it is stored with: readings are 4-byte floats (``RealField``), so
    an average of 312.7 W comes back as 312.70001220703125; 7 significant digits give 312.7."""
    return float(f"{value:.7g}") if isinstance(value, float) else value


def _adapt(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def _combine(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two partial buckets (raw, hourly or daily) of the same GPU and time."""
    out = dict(a, n=a["n"] + b["n"])
    for name, _, _, how in _COLUMNS:
        x, y = a[name], b[name]
        if x is None or y is None:
            out[name] = y if x is None else x
        elif how == "max":
            out[name] = max(x, y)
        else:
            out[name] = (x * a["n"] + y * b["n"]) / (a["n"] + b["n"])
    return out
