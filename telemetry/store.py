"""Bulk writes of the ingest path: one statement (or one executemany) per table per batch.

Plain SQL where the ORM cannot say it (``ON CONFLICT DO NOTHING RETURNING``, conditional
upserts) and PostgreSQL's COPY for the biggest table. Values go through each field's
``get_db_prep_save`` so SQLite and PostgreSQL store them the same way the ORM would.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, models

from .models import GpuSample, GpuState, NodeHealth, NodeReport, XidRecord

Row = dict[str, Any]

SAMPLE_COLUMNS = [f.attname for f in GpuSample._meta.concrete_fields]
XID_COLUMNS = [f.attname for f in XidRecord._meta.concrete_fields]
REPORT_COLUMNS = [f.attname for f in NodeReport._meta.concrete_fields]
GPU_STATE_COLUMNS = [f.attname for f in GpuState._meta.concrete_fields if f.attname not in ("id", "xid_gauge")]
HEALTH_COLUMNS = [f.attname for f in NodeHealth._meta.concrete_fields]
# Set on every report, even an out-of-order one: a node that sends anything is alive.
HEALTH_ALWAYS = {"node_id", "last_received_at"}


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _prepared_rows(model: type[models.Model], columns: Sequence[str], rows: Iterable[Row]) -> list[list[Any]]:
    fields = [model._meta.get_field(c) for c in columns]  # get_field knows attnames ("node_id") too
    return [[f.get_db_prep_save(row[c], connection) for f, c in zip(fields, columns, strict=True)] for row in rows]


def _prepared(model: type[models.Model], columns: Sequence[str], rows: Iterable[Row]) -> list[Any]:
    return [value for row in _prepared_rows(model, columns, rows) for value in row]


def _insert_many(model: type[models.Model], columns: Sequence[str], rows: Sequence[Row], suffix: str = "") -> None:
    """One prepared INSERT run over all rows: a single executemany (pipelined by psycopg 3,
    in-process on SQLite), where bulk_create would split into many statements to stay
    under SQLite's parameter limit."""
    with connection.cursor() as cursor:
        cursor.executemany(_values_sql(model, columns, 1) + suffix, _prepared_rows(model, columns, rows))


def _values_sql(model: type[models.Model], columns: Sequence[str], count: int) -> str:
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    names = ", ".join(_q(c) for c in columns)
    return f"INSERT INTO {_q(model._meta.db_table)} ({names}) VALUES " + ", ".join([placeholders] * count)


def insert_new_reports(rows: Sequence[Row]) -> set[str]:
    """Insert NodeReport rows, skipping those already stored; returns the new report_ids.

    The caller has removed duplicates within the batch, so each report_id is unique here.
    """
    if not rows:
        return set()
    sql = _values_sql(NodeReport, REPORT_COLUMNS, len(rows)) + " ON CONFLICT DO NOTHING RETURNING report_id"
    with connection.cursor() as cursor:
        cursor.execute(sql, _prepared(NodeReport, REPORT_COLUMNS, rows))
        return {row[0] for row in cursor.fetchall()}


def store_samples(rows: Sequence[Row]) -> None:
    """GpuSample rows: COPY on PostgreSQL (the fleet's biggest table), bulk_create elsewhere.

    No conflict is possible: rows come only from reports that were new in this transaction.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        _insert_many(GpuSample, SAMPLE_COLUMNS, rows)
        return
    names = ", ".join(_q(c) for c in SAMPLE_COLUMNS)
    # Django's wrapper has no copy(): use the psycopg 3 cursor underneath.
    with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {_q(GpuSample._meta.db_table)} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in SAMPLE_COLUMNS])


def store_xids(rows: Sequence[Row]) -> None:
    """XidRecord rows; a line already stored (same fingerprint and instant) is skipped."""
    if rows:
        _insert_many(XidRecord, XID_COLUMNS, rows, " ON CONFLICT DO NOTHING")


def upsert_gpu_states(rows: Sequence[Row]) -> None:
    """Latest GPU rows; an existing row newer than the incoming one is left alone (a late,
    out-of-order report or a concurrent request must not roll the state back)."""
    if not rows:
        return
    table = _q(GpuState._meta.db_table)
    updates = ", ".join(f"{_q(c)} = EXCLUDED.{_q(c)}" for c in GPU_STATE_COLUMNS if c not in ("node_id", "index"))
    sql = (
        _values_sql(GpuState, GPU_STATE_COLUMNS, len(rows))
        + f" ON CONFLICT ({_q('node_id')}, {_q('index')}) DO UPDATE SET {updates}"
        + f" WHERE {table}.{_q('updated_at')} <= EXCLUDED.{_q('updated_at')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, _prepared(GpuState, GPU_STATE_COLUMNS, rows))


def upsert_node_health(row: Row) -> None:
    """The node's latest row. Fields describing the report only move forward in time;
    ``last_received_at`` always moves (the node is alive whatever it sent)."""
    table = _q(NodeHealth._meta.db_table)
    newer = f"EXCLUDED.{_q('last_report_at')} >= {table}.{_q('last_report_at')}"
    updates = []
    for column in HEALTH_COLUMNS:
        if column == "node_id":
            continue
        if column in HEALTH_ALWAYS:
            updates.append(f"{_q(column)} = EXCLUDED.{_q(column)}")
        else:
            updates.append(f"{_q(column)} = CASE WHEN {newer} THEN EXCLUDED.{_q(column)} ELSE {table}.{_q(column)} END")
    sql = _values_sql(NodeHealth, HEALTH_COLUMNS, 1) + f" ON CONFLICT ({_q('node_id')}) DO UPDATE SET " + ", ".join(updates)
    with connection.cursor() as cursor:
        cursor.execute(sql, _prepared(NodeHealth, HEALTH_COLUMNS, [row]))
