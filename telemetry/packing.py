"""Raw history packed per node-hour, and the one road by which readers get raw samples.

Raw rows take about 100 bytes each with their index entries, and a node sends about 23,000
of them a day. Once an hour is past (PACK_DELAY after its end, so a late report of it has
mostly arrived), ``pack_past_hours`` rolls the hour's samples into ``GpuSampleHourly`` (what
the year-long charts read), packs each node's reports and samples of the hour into one
``TelemetryHourPack`` row (``telemetry.packformat``) and deletes the raw rows: one transaction
per chunk of nodes, so a packed hour is never also raw, and a run can stop anywhere.
Running it again finds nothing to do; a report arriving late for a packed hour is stored raw
and merged into the hour's pack (and its roll-up) by the next run.

Duplicates: the ingest drops a report that its hour's pack holds (``packed_report_times``). A resend
that races the packing of its own hour (read before the pack commits, inserted after the raw row
is deleted) is accepted once more; the next run's merge keeps the pack's copy of the report and its
samples, so it is stored once, though its samples are counted twice in that hour's roll-up.

Readers: ``samples`` (one node's rows, packed or not), ``packed_samples`` (its packed rows) and
``packed_columns`` (a few columns of a node or a range of nodes, one pack at a time, no rows built:
what charts finer than an hour read). Packs are read for hours from ``raw_floor`` on and the
hourly roll-ups before it, so no hour is counted from both. Charts of hour-wide buckets and the
trends read every packed hour's roll-up instead, made when it was packed (with the hour's samples
under load counted one by one for the trends).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Min
from django.utils import timezone

from . import packformat, retention, store
from .models import GpuSample, NodeReport, RealField, TelemetryHourPack

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
PACK_DELAY = timedelta(minutes=10)  # after an hour's end: reports sent at its last second arrive
PACK_NODE_CHUNK = 50  # nodes per transaction: 50 node-hours are ~50,000 rows in memory
_SAMPLE_KEYS = ("node_id", "collected_at", "gpu_index")
_REPORT_KINDS = {
    "report_id": "s",
    "received_at": "t",
    "seq": "i",
    "source": "s",
    "gpu_count": "i",
    "xid_count": "i",
    "summary": "j",
}
SAMPLE_FIELDS = store.SAMPLE_FIELDS  # GpuSample's columns besides _SAMPLE_KEYS


def _sample_kind(field: models.Field[Any, Any]) -> str:
    if isinstance(field, RealField):
        # SQLite stores every REAL in 8 bytes: only PostgreSQL's ``real`` rounds to 4.
        return "r" if connection.vendor == "postgresql" else "f"
    if isinstance(field, models.FloatField):
        return "f"
    return "b" if isinstance(field, models.BooleanField) else "i"


def columns() -> dict[str, dict[str, str]]:
    """The packed columns and their kinds (``packformat.encode_column``)."""
    fields = {f.attname: f for f in GpuSample._meta.concrete_fields}
    return {"r": _REPORT_KINDS, "g": {name: _sample_kind(fields[name]) for name in SAMPLE_FIELDS}}


def floor_hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def raw_floor(now: datetime | None = None) -> datetime:
    """The first hour read from packs (and raw rows); hours before it are read from roll-ups.

    Retention drops packs before this hour (``retention.roll_up_and_prune``); until it runs, such a pack and its
    hour's roll-up both exist, and readers must take one of them: the roll-up."""
    return floor_hour((now or timezone.now()) - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS))


# --- Packing (the beat) -------------------------------------------------------------------


@dataclass
class PackResult:
    """What one run packed."""

    packs: int = 0
    reports: int = 0
    samples: int = 0
    finished: bool = True


def pack_past_hours(*, now: datetime | None = None, max_batches: int = 200) -> PackResult:
    """Pack every node-hour of raw rows that ended PACK_DELAY ago or earlier, oldest hour first,
    at most ``max_batches`` transactions (of PACK_NODE_CHUNK nodes)."""
    cutoff = floor_hour((now or timezone.now()) - PACK_DELAY)
    result, budget = PackResult(), [max_batches]
    while budget[0] > 0 and (hour := _oldest_raw_hour(cutoff)) is not None:
        _pack_hour(hour, budget, result)
    result.finished = budget[0] > 0
    log.info("telemetry packing: %s", result)
    return result


def _oldest_raw_hour(cutoff: datetime) -> datetime | None:
    oldest = [
        model._default_manager.filter(collected_at__lt=cutoff).aggregate(t=Min("collected_at"))["t"]
        for model in (NodeReport, GpuSample)
    ]
    found = [t for t in oldest if t is not None]
    return floor_hour(min(found)) if found else None


def _in_hour(model: type[models.Model], hour: datetime) -> models.QuerySet[Any]:
    return model._default_manager.filter(collected_at__gte=hour, collected_at__lt=hour + HOUR)


def _pack_hour(hour: datetime, budget: list[int], result: PackResult) -> None:
    nodes = sorted(
        set(_in_hour(NodeReport, hour).values_list("node_id", flat=True).distinct())
        | set(_in_hour(GpuSample, hour).values_list("node_id", flat=True).distinct())
    )
    for start in range(0, len(nodes), PACK_NODE_CHUNK):
        if budget[0] <= 0:
            return
        chunk = nodes[start : start + PACK_NODE_CHUNK]
        _pack_chunk(hour, chunk[0], chunk[-1] + 1, result)
        budget[0] -= 1


@transaction.atomic
def _pack_chunk(hour: datetime, node_from: int, node_to: int, result: PackResult) -> None:
    """Roll up, pack and delete the hour's raw rows of nodes in [node_from, node_to)."""
    in_range = {"node_id__gte": node_from, "node_id__lt": node_to}
    # The roll-up reads the raw rows first: once packed, they are gone from GpuSample.
    retention._insert_rollup(hour, node_from, node_to)
    reports = _in_hour(NodeReport, hour).filter(**in_range).values("node_id", "collected_at", *_REPORT_KINDS)
    samples = _in_hour(GpuSample, hour).filter(**in_range).values(*_SAMPLE_KEYS, *SAMPLE_FIELDS)
    per_node: dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for row in reports:
        per_node.setdefault(row.pop("node_id"), ([], []))[0].append(row)
    for row in samples:
        per_node.setdefault(row.pop("node_id"), ([], []))[1].append(row)
    existing = TelemetryHourPack.objects.select_for_update().filter(hour=hour, **in_range)
    kinds = columns()
    for pack in existing:
        _merge_into(per_node.setdefault(pack.node_id, ([], [])), packformat.decode(hour, bytes(pack.blob), kinds))
    existing.delete()
    TelemetryHourPack.objects.bulk_create(
        TelemetryHourPack(
            node_id=node_id,
            hour=hour,
            reports=len(rows),
            samples=len(gpu_rows),
            blob=packformat.encode(hour, rows, gpu_rows, kinds),
        )
        for node_id, (rows, gpu_rows) in per_node.items()
    )
    result.packs += len(per_node)
    result.reports += _in_hour(NodeReport, hour).filter(**in_range).delete()[0]
    result.samples += _in_hour(GpuSample, hour).filter(**in_range).delete()[0]


def _merge_into(fresh: tuple[list[dict[str, Any]], list[dict[str, Any]]], packed: tuple[list[Any], list[Any]]) -> None:
    """Late raw rows of a packed hour join its pack; a row the pack holds already stays as packed."""
    reports, samples = fresh
    report_times = {r["collected_at"] for r in packed[0]}
    sample_keys = {(s["collected_at"], s["gpu_index"]) for s in packed[1]}
    reports[:] = packed[0] + [r for r in reports if r["collected_at"] not in report_times]
    samples[:] = packed[1] + [s for s in samples if (s["collected_at"], s["gpu_index"]) not in sample_keys]


# --- Reading ------------------------------------------------------------------------------


def _packs(
    node_filter: dict[str, Any], since: datetime, until: datetime, now: datetime | None
) -> models.QuerySet[TelemetryHourPack]:
    first = max(floor_hour(since), raw_floor(now))
    return TelemetryHourPack.objects.filter(hour__gte=first, hour__lt=until, **node_filter).order_by("node_id", "hour")


def _decoded_samples(
    pack: TelemetryHourPack, since: datetime, until: datetime, gpu: int | None
) -> list[dict[str, Any]]:
    _, rows = packformat.decode(pack.hour, bytes(pack.blob), columns())
    return [r for r in rows if since <= r["collected_at"] < until and (gpu is None or r["gpu_index"] == gpu)]


def packed_samples(
    node_id: int, *, since: datetime, until: datetime, gpu: int | None = None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The packed samples of a node in [since, until) (``SAMPLE_FIELDS`` and the keys)."""
    rows = []
    for pack in _packs({"node_id": node_id}, since, until, now):
        rows += _decoded_samples(pack, since, until, gpu)
    return rows


def samples(
    node_id: int, *, since: datetime, until: datetime, gpu: int | None = None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Every raw sample of a node in [since, until), packed or not, by time then GPU."""
    raw = GpuSample.objects.filter(node_id=node_id, collected_at__gte=since, collected_at__lt=until)
    if gpu is not None:
        raw = raw.filter(gpu_index=gpu)
    rows = packed_samples(node_id, since=since, until=until, gpu=gpu, now=now)
    rows += [dict(r, node_id=node_id) for r in raw.values("collected_at", "gpu_index", *SAMPLE_FIELDS)]
    for row in rows:
        row.setdefault("node_id", node_id)
    return sorted(rows, key=lambda r: (r["collected_at"], r["gpu_index"]))


def packed_columns(
    node_from: int, node_to: int, names: list[str], *, since: datetime, until: datetime, now: datetime | None = None
) -> Iterator[tuple[int, int, list[datetime], dict[str, list[Any]]]]:
    """(node id, GPU index, instants, name -> values) of the packed samples of nodes node_from..node_to
    (inclusive) in the packs of hours overlapping [since, until): whole hours, the caller bounds the
    instants. One pack in memory at a time, only the ``names`` columns decoded."""
    kinds = columns()["g"]
    packs = _packs({"node_id__gte": node_from, "node_id__lte": node_to}, since, until, now)
    for pack in packs.iterator(chunk_size=200):
        for index, at, values in packformat.decode_gpu_columns(pack.hour, bytes(pack.blob), kinds, names):
            yield pack.node_id, index, at, values


def packed_report_times(node_id: int, times: list[datetime]) -> set[datetime]:
    """Of ``times``, those at which the node has a report in a pack (a resend of it is a duplicate)."""
    return packed_report_times_of_nodes({node_id: times}).get(node_id, set())


def packed_report_times_of_nodes(times: dict[int, list[datetime]]) -> dict[int, set[datetime]]:
    """``packed_report_times`` for several nodes in one statement (a group of ingest requests):
    per node, those of its ``times`` at which a pack holds a report of it."""
    wanted = {(node_id, floor_hour(t)) for node_id, node_times in times.items() for t in node_times}
    if not wanted:
        return {}
    found: dict[int, set[datetime]] = {}
    for node_id, hour, blob in _packs_of(wanted):
        found.setdefault(node_id, set()).update(packformat.report_times(hour, bytes(blob)))
    return {node_id: hits & set(times[node_id]) for node_id, hits in found.items() if hits & set(times[node_id])}


def _packs_of(wanted: set[tuple[int, datetime]]) -> list[tuple[int, datetime, Any]]:
    """(node_id, hour, blob) of the packs of these (node, hour) pairs. On PostgreSQL one statement of
    the same text whatever their number (the ingest of an agent's flushed buffer asks for each group);
    elsewhere the ORM's read, whose cross product the pairs then filter."""
    if connection.vendor == "postgresql":
        node_ids, hours = zip(*wanted, strict=True)
        with store.bound_cursor(binary=True, prepare=False) as cursor:
            cursor.execute(_packs_sql(), [store.array_literal(node_ids), store.array_literal(hours)])
            rows: list[tuple[int, datetime, Any]] = cursor.fetchall()
            return rows
    packs = TelemetryHourPack.objects.filter(
        node_id__in={node_id for node_id, _ in wanted}, hour__in={hour for _, hour in wanted}
    ).values_list("node_id", "hour", "blob")
    return [pack for pack in packs if (pack[0], pack[1]) in wanted]


@functools.cache
def _packs_sql() -> str:
    q = connection.ops.quote_name
    return (
        f"SELECT p.{q('node_id')}, p.{q('hour')}, p.{q('blob')} FROM {q(TelemetryHourPack._meta.db_table)} p"  # noqa: S608 - the model's names; values are parameters
        f" JOIN unnest(%s::bigint[], %s::timestamptz[]) AS w(node_id, hour)"
        f" ON p.{q('node_id')} = w.node_id AND p.{q('hour')} = w.hour"
    )
