"""Bulk writes of the ingest path: one statement per table per batch.

Plain SQL where the ORM cannot say it (``ON CONFLICT DO NOTHING RETURNING``, conditional
upserts) and PostgreSQL's COPY for the biggest table. This is the hottest code in the
portal (3,000 reports a second for a fleet of 90,000 nodes), so:

- every statement's text is built once per database vendor, not per call;
- on PostgreSQL a table's rows travel as one JSON array, expanded server-side by
  ``json_populate_recordset`` into the table's own column types: one short statement
  whatever the batch size (psycopg caches the parsing of statements under 4 KB only),
  and one ``msgspec`` encode instead of adapting every value in Python;
- elsewhere (SQLite, the quick test loop) values go through each field's
  ``get_db_prep_save`` so they are stored the way the ORM would store them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from django.db import connection, models
from django.db.models import QuerySet

from .models import GpuSample, GpuState, NodeHealth, NodeReport, XidRecord

Row = dict[str, Any]

SAMPLE_COLUMNS = [f.attname for f in GpuSample._meta.concrete_fields]
XID_COLUMNS = [f.attname for f in XidRecord._meta.concrete_fields]
REPORT_COLUMNS = [f.attname for f in NodeReport._meta.concrete_fields]
GPU_STATE_COLUMNS = [f.attname for f in GpuState._meta.concrete_fields if f.attname not in ("id", "xid_gauge")]
HEALTH_COLUMNS = [f.attname for f in NodeHealth._meta.concrete_fields]
# Set on every report, even an out-of-order one: a node that sends anything is alive.
HEALTH_ALWAYS = {"node_id", "last_received_at"}

_encode = msgspec.json.Encoder().encode


class CompiledRead:
    """A read on the hot path, compiled by the ORM once per database vendor, not per call.

    ``build`` gets one placeholder per argument and returns the queryset (``values_list``
    or ``values``); ``fetch(*args)`` runs its SQL with the arguments in their place and
    returns the rows the ORM would (the field converters applied: JSON decoded, SQLite's
    datetimes and booleans turned into Python's). Compiling a queryset costs about as much
    as running it; the ingest runs the same three reads thousands of times a second.
    """

    _PLACEHOLDER = -987_654_321  # an id no row has; each argument gets its own

    def __init__(self, build: Callable[..., QuerySet]) -> None:
        self._build = build
        self._compiled: dict[str, tuple[Any, str, list[tuple[int, Any]], dict[int, Any]]] = {}

    def _compile(self, arity: int) -> tuple[Any, str, list[tuple[int, Any]], dict[int, Any]]:
        placeholders = [self._PLACEHOLDER - i for i in range(arity)]
        compiler = self._build(*placeholders).query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        # (argument number, None) where an argument goes, (-1, value) for the query's constants.
        slots = [(placeholders.index(p), None) if p in placeholders else (-1, p) for p in params]
        if sorted(n for n, _ in slots if n >= 0) != list(range(arity)):
            raise ValueError(f"each argument must appear once as a parameter of the query: {sql}")
        converters = compiler.get_converters([col for col, _, _ in compiler.select[:compiler.col_count]])
        return compiler, sql, slots, converters

    def fetch(self, *args: Any) -> list[Any]:
        key = f"{connection.vendor}/{len(args)}"
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(len(args))
        compiler, sql, slots, converters = compiled
        with connection.cursor() as cursor:
            cursor.execute(sql, [args[n] if n >= 0 else value for n, value in slots])
            rows = cursor.fetchall()
        if not rows or not converters:
            return rows
        # The compiler's own converters: the ORM would have applied the same.
        return [tuple(row) for row in compiler.apply_converters(rows, converters)]


@dataclass(frozen=True)
class _Table:
    """One table's write statement, in both shapes: ``json`` (PostgreSQL, the rows as one
    JSON parameter) and ``values`` (one row of placeholders, run with executemany)."""

    model: type[models.Model]
    columns: tuple[str, ...]
    json: str
    values: str

    def prepared(self, rows: Sequence[Row]) -> list[list[Any]]:
        """Rows as the ORM would send them (the non-PostgreSQL path)."""
        fields = [self.model._meta.get_field(c) for c in self.columns]  # get_field knows attnames too
        return [[f.get_db_prep_save(row[c], connection) for f, c in zip(fields, self.columns, strict=True)]
                for row in rows]


def _table(model: type[models.Model], columns: Sequence[str], suffix: str = "") -> _Table:
    q = connection.ops.quote_name
    table, names = q(model._meta.db_table), ", ".join(q(c) for c in columns)
    head = f"INSERT INTO {table} ({names}) "
    return _Table(
        model=model, columns=tuple(columns),
        json=f"{head}SELECT {names} FROM json_populate_recordset(NULL::{table}, %s::json){suffix}",
        values=f"{head}VALUES ({', '.join(['%s'] * len(columns))}){suffix}",
    )


def _gpu_state_suffix() -> str:
    q = connection.ops.quote_name
    table = q(GpuState._meta.db_table)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in GPU_STATE_COLUMNS if c not in ("node_id", "index"))
    return (f" ON CONFLICT ({q('node_id')}, {q('index')}) DO UPDATE SET {updates}"
            f" WHERE {table}.{q('updated_at')} <= EXCLUDED.{q('updated_at')}")


def _health_suffix() -> str:
    q = connection.ops.quote_name
    table = q(NodeHealth._meta.db_table)
    newer = f"EXCLUDED.{q('last_report_at')} >= {table}.{q('last_report_at')}"
    updates = [
        f"{q(c)} = EXCLUDED.{q(c)}" if c in HEALTH_ALWAYS
        else f"{q(c)} = CASE WHEN {newer} THEN EXCLUDED.{q(c)} ELSE {table}.{q(c)} END"
        for c in HEALTH_COLUMNS if c != "node_id"
    ]
    return f" ON CONFLICT ({q('node_id')}) DO UPDATE SET " + ", ".join(updates)


@dataclass(frozen=True)
class _Statements:
    reports: _Table
    xids: _Table
    samples: _Table
    gpu_states: _Table
    health: _Table
    copy_samples: str


_statements: dict[str, _Statements] = {}


def _sql() -> _Statements:
    """The statements for the current database vendor, built on first use."""
    built = _statements.get(connection.vendor)
    if built is None:
        q = connection.ops.quote_name
        built = _statements[connection.vendor] = _Statements(
            reports=_table(NodeReport, REPORT_COLUMNS, " ON CONFLICT DO NOTHING RETURNING report_id"),
            xids=_table(XidRecord, XID_COLUMNS, " ON CONFLICT DO NOTHING"),
            samples=_table(GpuSample, SAMPLE_COLUMNS),
            gpu_states=_table(GpuState, GPU_STATE_COLUMNS, _gpu_state_suffix()),
            health=_table(NodeHealth, HEALTH_COLUMNS, _health_suffix()),
            copy_samples=(f"COPY {q(GpuSample._meta.db_table)} ({', '.join(q(c) for c in SAMPLE_COLUMNS)})"
                          " FROM STDIN"),
        )
    return built


def _write(cursor: Any, table: _Table, rows: Sequence[Row]) -> None:
    """One statement on PostgreSQL; one executemany (in-process on SQLite) elsewhere, where
    a multi-row VALUES would have to be split to stay under SQLite's parameter limit."""
    if connection.vendor == "postgresql":
        cursor.execute(table.json, [_encode(rows).decode()])
    else:
        cursor.executemany(table.values, table.prepared(rows))


def insert_new_reports(rows: Sequence[Row]) -> set[str]:
    """Insert NodeReport rows, skipping those already stored; returns the new report_ids.

    The caller has removed duplicates within the batch, so each report_id is unique here.
    """
    if not rows:
        return set()
    table = _sql().reports
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(table.json, [_encode(rows).decode()])
            return {row[0] for row in cursor.fetchall()}
        # executemany cannot return rows: one multi-row VALUES (the batch is at most 500 rows).
        row = "(" + ", ".join(["%s"] * len(table.columns)) + ")"
        sql = table.values.replace(f"VALUES {row}", "VALUES " + ", ".join([row] * len(rows)), 1)
        cursor.execute(sql, [value for values in table.prepared(rows) for value in values])
        return {row[0] for row in cursor.fetchall()}


def store_samples(rows: Sequence[Sequence[Any]]) -> None:
    """GpuSample rows, as value lists in ``SAMPLE_COLUMNS`` order: COPY on PostgreSQL (the
    fleet's biggest table), one executemany elsewhere.

    No conflict is possible: rows come only from reports that were new in this transaction.
    """
    if not rows:
        return
    statements = _sql()
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            table = statements.samples
            cursor.executemany(table.values, table.prepared([dict(zip(SAMPLE_COLUMNS, r)) for r in rows]))
            return
        # Django's wrapper has no copy(): use the psycopg 3 cursor underneath.
        with cursor.cursor.copy(statements.copy_samples) as copy:
            for row in rows:
                copy.write_row(row)


def store_xids(rows: Sequence[Row]) -> None:
    """XidRecord rows; a line already stored (same fingerprint and instant) is skipped."""
    if rows:
        with connection.cursor() as cursor:
            _write(cursor, _sql().xids, rows)


def upsert_gpu_states(rows: Sequence[Row]) -> None:
    """Latest GPU rows; an existing row newer than the incoming one is left alone (a late,
    out-of-order report or a concurrent request must not roll the state back)."""
    if rows:
        with connection.cursor() as cursor:
            _write(cursor, _sql().gpu_states, rows)


def upsert_node_health(row: Row) -> None:
    """The node's latest row. Fields describing the report only move forward in time;
    ``last_received_at`` always moves (the node is alive whatever it sent)."""
    with connection.cursor() as cursor:
        _write(cursor, _sql().health, [row])
