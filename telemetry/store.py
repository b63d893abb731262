"""Bulk writes of the ingest path: one statement per table per batch.

Plain SQL where the ORM cannot say it (``ON CONFLICT DO NOTHING RETURNING``, conditional
upserts) and PostgreSQL's COPY for the biggest table. This is the hottest code in the
portal (3,000 reports a second for a fleet of 90,000 nodes), so:

- every statement's text is built once per database vendor, not per call;
- on PostgreSQL a table's rows travel as one JSON array, expanded server-side by
  ``jsonb_populate_recordset`` into the table's own column types: one short statement
  whatever the batch size, and one ``msgspec`` encode instead of adapting every value in
  Python. As ``jsonb``, not ``json``: the rows' own JSON columns (a report's summary, the
  host vitals) are then parsed once, not again from text; a group's report insert and
  health upsert took half the time (0.54 to 0.27 and 0.50 to 0.25 ms, bench/ingest.py);
- elsewhere (SQLite, the quick test loop) values go through each field's
  ``get_db_prep_save`` so they are stored the way the ORM would store them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from django.db import connection, models, transaction
from django.db.models import QuerySet

from fleet.models import HardwareProfile
from nodes.models import Node

from .consumers import NodeRows
from .models import GpuSample, GpuState, NodeHealth, NodeReport, XidIdentity, XidRecord
from .schema import GpuReading

Row = dict[str, Any]

SAMPLE_COLUMNS = [f.attname for f in GpuSample._meta.concrete_fields]
XID_COLUMNS = [f.attname for f in XidRecord._meta.concrete_fields]
XID_IDENTITY_COLUMNS = [f.attname for f in XidIdentity._meta.concrete_fields]
REPORT_COLUMNS = [f.attname for f in NodeReport._meta.concrete_fields]
GPU_STATE_COLUMNS = [f.attname for f in GpuState._meta.concrete_fields if f.attname not in ("id", "xid_gauge")]
HEALTH_COLUMNS = [f.attname for f in NodeHealth._meta.concrete_fields]
# Set on every report, even an out-of-order one: a node that sends anything is alive.
HEALTH_ALWAYS = {"node_id", "last_received_at"}

_encode = msgspec.json.Encoder().encode
encode = _encode  # rows and JSON columns as the hot path's statements send them


def array_literal(values: Sequence[int | datetime | None]) -> str:
    """A PostgreSQL array of integers or instants in its text form, for a parameter the statement
    casts (``%s::bigint[]``, ``%s::timestamptz[]``). psycopg's array dumper is Python: 114 µs for the
    three 22-element arrays of a group's node read, where msgspec writes this text in 1 µs. JSON's
    ``null`` is also the array's NULL, and an instant is quoted, as RFC 3339 text."""
    return "{" + _encode(values).decode()[1:-1] + "}"


class CompiledRead:
    """A read on the hot path, compiled by the ORM once per database vendor, not per call.

    ``build`` gets one placeholder per argument and returns the queryset (``values_list``
    or ``values``); ``fetch(*args)`` runs its SQL with the arguments in their place and
    returns the rows the ORM would (the field converters applied: JSON decoded, SQLite's
    datetimes and booleans turned into Python's). Compiling a queryset costs about as much
    as running it; the ingest runs the same three reads thousands of times a second.
    """

    _PLACEHOLDER = -987_654_321  # an id no row has; each argument gets its own

    def __init__(self, build: Callable[..., QuerySet[Any]]) -> None:
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
        converters = compiler.get_converters([col for col, _, _ in compiler.select[: compiler.col_count]])
        return compiler, sql, slots, converters

    def fetch(self, *args: Any) -> list[Any]:
        key = f"{connection.vendor}/{len(args)}"
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(len(args))
        compiler, sql, slots, converters = compiled
        with connection.cursor() as cursor:
            cursor.execute(sql, [args[n] if n >= 0 else value for n, value in slots])
            rows: list[Any] = cursor.fetchall()
        if not rows or not converters:
            return rows
        # The compiler's own converters: the ORM would have applied the same.
        return [tuple(row) for row in compiler.apply_converters(rows, converters)]


def _column(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The model's field that has the column ``name`` (get_field knows attnames too)."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):  # a reverse relation: no column of this table
        raise LookupError(f"{model.__name__} has no column {name!r}")
    return field


@dataclass(frozen=True)
class _Table:
    """One table's write statement, in both shapes: ``json`` (PostgreSQL, the rows as one
    JSON parameter) and ``values`` (one row of placeholders, run with executemany)."""

    model: type[models.Model]
    columns: tuple[str, ...]
    json: str
    values: str

    def prepared(self, rows: Sequence[Row]) -> list[list[Any]]:
        """Rows as the ORM would send them (the non-PostgreSQL path). A JSON column's value may hold
        the agent's structs, as msgspec encodes them for PostgreSQL: plain values first."""
        fields = [_column(self.model, c) for c in self.columns]
        return [
            [
                f.get_db_prep_save(
                    msgspec.to_builtins(row[c]) if isinstance(f, models.JSONField) else row[c], connection
                )
                for f, c in zip(fields, self.columns, strict=True)
            ]
            for row in rows
        ]


def _table(model: type[models.Model], columns: Sequence[str], suffix: str = "") -> _Table:
    q = connection.ops.quote_name
    table, names = q(model._meta.db_table), ", ".join(q(c) for c in columns)
    head = f"INSERT INTO {table} ({names}) "
    return _Table(
        model=model,
        columns=tuple(columns),
        json=f"{head}SELECT {names} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb){suffix}",
        values=f"{head}VALUES ({', '.join(['%s'] * len(columns))}){suffix}",
    )


def _gpu_state_suffix() -> str:
    q = connection.ops.quote_name
    table = q(GpuState._meta.db_table)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in GPU_STATE_COLUMNS if c not in ("node_id", "index"))
    return (
        f" ON CONFLICT ({q('node_id')}, {q('index')}) DO UPDATE SET {updates}"
        f" WHERE {table}.{q('updated_at')} <= EXCLUDED.{q('updated_at')}"
    )


class NodeGpus(msgspec.Struct):
    """One report's GPU readings, as of that report: the node's latest GPU rows (``latest``), or
    only its history (``store_gpu_readings``). A group stages them by binary COPY as they are
    (``upsert_gpu_states``, ``store_gpu_readings``); a single request's one-statement write sends
    them as ``rows()``."""

    node_id: int
    updated_at: datetime
    gpus: list[GpuReading]
    latest: bool = True

    def rows(self) -> list[Row]:
        """One GpuState row per reading (every column, defaults too)."""
        return [
            {"node_id": self.node_id, "updated_at": self.updated_at, **msgspec.structs.asdict(g)} for g in self.gpus
        ]


# The staging table's columns: the node, the time and whether the row is the node's latest
# first, then the readings' fields in GpuState's order (a row is (node_id, updated_at, latest,
# *_reading_values(reading))).
GPU_READING_COLUMNS = tuple(c for c in GPU_STATE_COLUMNS if c not in ("node_id", "updated_at"))
GPU_STAGING_COLUMNS = ("node_id", "updated_at", "latest", *GPU_READING_COLUMNS)
# A reading's fields are GpuState's columns in the same order (tests/telemetry/test_ingest.py holds
# them so): its values as one tuple in C, 0.1 µs a reading where an attrgetter of 44 names took 0.5.
_reading_values: Callable[[GpuReading], tuple[Any, ...]] = msgspec.structs.astuple
GPU_STAGING_TABLE = "pg_temp.nodewarden_gpu_in"
# GpuSample's key columns and where a staged row has them; its other columns are readings' fields.
_SAMPLE_KEYS = {"node_id": "node_id", "collected_at": "updated_at", "gpu_index": "index"}
SAMPLE_FIELDS = tuple(c for c in SAMPLE_COLUMNS if c not in _SAMPLE_KEYS)
_sample_values = operator.attrgetter(*SAMPLE_FIELDS)  # a GpuReading's SAMPLE_FIELDS, in order


@dataclass(frozen=True)
class _GpuStaging:
    """PostgreSQL: a group's GPU readings go into a temporary table by binary COPY, then into
    GpuState (the rows marked latest, one upsert) and, for ``store_gpu_readings``, into GpuSample
    too, in the same statement. As one jsonb parameter, PostgreSQL spent 8.9 ms of a 50-node group
    parsing and upserting the latest rows (most of it parsing, at bind, where pg_stat_statements
    does not see it); as a binary COPY and an upsert from the table, 2.5 ms. The samples' own
    binary COPY cost the writer's Python as much again as the staging one (a row written by
    psycopg's formatter per GPU), for rows the staging table already held. The table is created,
    if it is not there, in each group's transaction, and emptied by the statement that reads it
    (and at commit): a pooler that hands the transaction to another server session (PgBouncer's
    transaction mode) finds or makes its own."""

    create: str
    copy: str
    types: tuple[str, ...]  # the binary COPY's column types, in GPU_STAGING_COLUMNS order
    upsert: str  # the latest rows into GpuState (ON CONFLICT: the road of a request alone)
    upsert_and_sample: str  # that (by MERGE), and every row into GpuSample: a group's


def _gpu_staging() -> _GpuStaging:
    q = connection.ops.quote_name
    table = q(GpuState._meta.db_table)
    readings = ", ".join(q(c) for c in GPU_READING_COLUMNS)
    create = (
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {GPU_STAGING_TABLE} ON COMMIT DELETE ROWS AS"
        f" SELECT {q('node_id')}, {q('updated_at')}, true AS {q('latest')}, {readings} FROM {table} WITH NO DATA"
    )
    staged = ", ".join(q(c) for c in GPU_STAGING_COLUMNS)
    copy = f"COPY {GPU_STAGING_TABLE} ({staged}) FROM STDIN (FORMAT BINARY)"
    names = ", ".join(q(c) for c in GPU_STATE_COLUMNS)
    # Emptied as it is read: one transaction may stage several times (groupcommit's rounds, a
    # node's second request among them), and a row staged twice could not be upserted twice.
    emptied = f"WITH staged AS (DELETE FROM {GPU_STAGING_TABLE} RETURNING *)"
    latest = f" INSERT INTO {table} ({names}) SELECT {names} FROM staged WHERE {q('latest')}{_gpu_state_suffix()}"
    # A data-modifying CTE runs whether or not the statement reads it. The readings' types are
    # GpuState's; GpuSample's narrower ones take them by PostgreSQL's assignment casts, as its COPY
    # would (the schema bounds each value to its sample column).
    sample_names = ", ".join(q(c) for c in SAMPLE_COLUMNS)
    sample_sources = ", ".join(q(_SAMPLE_KEYS.get(c, c)) for c in SAMPLE_COLUMNS)
    samples = (
        f"samples AS (INSERT INTO {q(GpuSample._meta.db_table)} ({sample_names})"
        f" SELECT {sample_sources} FROM {GPU_STAGING_TABLE})"
    )
    # A group's latest rows by MERGE: a row that exists is updated where the join finds it, where
    # ON CONFLICT tries each row as an insert first, then locks the row it met and updates it. The
    # statement reads the staged rows in place and a DELETE of its own empties the table: its parts
    # share one snapshot, so they all see every staged row. (Read through the DELETE ... RETURNING
    # above instead, each 2 kB row went through a tuple store first.) pgexp, 47-node groups with
    # changing readings, the three alternating: ON CONFLICT 3.00 ms, MERGE through RETURNING 2.88,
    # MERGE in place 2.44; bench/ingest.py --compare granian, alternating with the upsert (whose
    # reports repeat their readings): PostgreSQL 0.15 / 0.16 -> 0.14 / 0.14 ms a report. MERGE
    # needs PostgreSQL 15, the version Nodewarden is deployed and tested on, and its join is held
    # to the key (``_planned_by_keys``).
    # Two groups writing one node do not race here: each upserted the node's health row first, in
    # the same transaction, and the second waits for the first's commit. A row another writer
    # inserts meanwhile (one that does not go through the health row first) fails the group with a
    # unique violation: groupcommit then ingests each of its requests alone, by ON CONFLICT
    # (``upsert``), which finds the row committed (test_ingest_round_trips).
    sets = ", ".join(f"{q(c)} = s.{q(c)}" for c in GPU_STATE_COLUMNS if c not in ("node_id", "index"))
    values = ", ".join(f"s.{q(c)}" for c in GPU_STATE_COLUMNS)
    merge = (
        f"WITH {samples}, emptied AS (DELETE FROM {GPU_STAGING_TABLE})"
        f" MERGE INTO {table} g USING (SELECT * FROM {GPU_STAGING_TABLE} WHERE {q('latest')}) s"
        f" ON g.{q('node_id')} = s.{q('node_id')} AND g.{q('index')} = s.{q('index')}"
        f" WHEN MATCHED AND g.{q('updated_at')} <= s.{q('updated_at')} THEN UPDATE SET {sets}"
        f" WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
    )
    types = tuple("bool" if c == "latest" else _column_db_type(GpuState, c).split("(")[0] for c in GPU_STAGING_COLUMNS)
    return _GpuStaging(create, copy, types, emptied + latest, merge)


def _health_suffix() -> str:
    q = connection.ops.quote_name
    table = q(NodeHealth._meta.db_table)
    newer = f"EXCLUDED.{q('last_report_at')} >= {table}.{q('last_report_at')}"
    updates = [
        f"{q(c)} = EXCLUDED.{q(c)}"
        if c in HEALTH_ALWAYS
        else f"{q(c)} = CASE WHEN {newer} THEN EXCLUDED.{q(c)} ELSE {table}.{q(c)} END"
        for c in HEALTH_COLUMNS
        if c != "node_id"
    ]
    return f" ON CONFLICT ({q('node_id')}) DO UPDATE SET " + ", ".join(updates)


@dataclass(frozen=True)
class _Statements:
    reports: _Table
    xids: _Table
    xid_identities: _Table
    samples: _Table
    gpu_states: _Table
    health: _Table
    copy_samples: str
    sample_types: tuple[str, ...]  # the binary COPY's column types, in SAMPLE_COLUMNS order
    gpu_staging: _GpuStaging  # PostgreSQL: create the staging table, COPY into it, write from it


_statements: dict[str, _Statements] = {}


def _sql() -> _Statements:
    """The statements for the current database vendor, built on first use."""
    built = _statements.get(connection.vendor)
    if built is None:
        q = connection.ops.quote_name
        built = _statements[connection.vendor] = _Statements(
            reports=_table(NodeReport, REPORT_COLUMNS, " ON CONFLICT DO NOTHING RETURNING report_id"),
            xids=_table(XidRecord, XID_COLUMNS, " ON CONFLICT DO NOTHING"),
            xid_identities=_table(XidIdentity, XID_IDENTITY_COLUMNS, " ON CONFLICT DO NOTHING RETURNING fingerprint"),
            samples=_table(GpuSample, SAMPLE_COLUMNS),
            gpu_states=_table(GpuState, GPU_STATE_COLUMNS, _gpu_state_suffix()),
            health=_table(NodeHealth, HEALTH_COLUMNS, _health_suffix()),
            copy_samples=(
                f"COPY {q(GpuSample._meta.db_table)} ({', '.join(q(c) for c in SAMPLE_COLUMNS)}) FROM STDIN"
                " (FORMAT BINARY)"
            ),
            sample_types=tuple(_column_db_type(GpuSample, c) for c in SAMPLE_COLUMNS),
            gpu_staging=_gpu_staging(),
        )
    return built


@contextmanager
def bound_cursor(*, binary: bool = False, prepare: bool = True) -> Iterator[Any]:
    """A cursor for the hot path's own statements (PostgreSQL; elsewhere the usual cursor).

    - It binds parameters on the server: a group's rows go as one JSON text parameter, where
      Django's cursor (client-side binding) escapes the text in Python and splices it into the
      SQL for PostgreSQL's parser to scan again (bench/ingest.py: 0.41-0.43 to 0.34-0.40 ms of
      PostgreSQL per report, 0.51 to 0.47-0.50 ms of Python).
    - With ``prepare`` its statements are prepared on their first run on the connection: the
      ingest sends the same few writes thousands of times a second, and planning them took about
      0.2 ms of PostgreSQL a group. Reads are not (``prepare=False``): a prepared read soon runs
      a generic plan, and one made while a table was small (a fresh database) kept scanning whole
      tables: 1.6 ms instead of 0.4 for a group's node read. Django's own cursors bind on the
      client and are never prepared, so this changes nothing else on the connection. (A pooler in
      front must support protocol-level prepared statements: PgBouncer >= 1.21 does.)
    - With ``binary`` its results come in PostgreSQL's binary format, read by psycopg's C loaders
      (Django's own loader of ``timestamptz`` text is Python, a tenth of a group's read).

    Wrapped as Django wraps its own: errors are Django's, and the statements are in the query log.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    pg: Any = connection.connection
    logged = connection.queries_logged
    # psycopg keeps no text of a prepared statement's run for the query log (DEBUG, a test's
    # CaptureQueriesContext) to show: while statements are logged, they are not prepared.
    pg.prepare_threshold = 0 if prepare and not logged else None
    raw: Any = psycopg.Cursor(pg)  # django-stubs type make_cursor's argument as the wrapper itself
    if binary:
        raw.format = psycopg.pq.Format.BINARY
    wrapped = connection.make_debug_cursor(raw) if logged else connection.make_cursor(raw)
    with wrapped as cursor:
        yield cursor


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
    with bound_cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(table.json, [_encode(rows).decode()])
            return {row[0] for row in cursor.fetchall()}
        # executemany cannot return rows: one multi-row VALUES (the batch is at most 500 rows).
        return _insert_returning(cursor, table, rows)


def sample_rows(nodes: Sequence[NodeGpus]) -> list[tuple[Any, ...]]:
    """The readings as GpuSample rows, value lists in ``SAMPLE_COLUMNS`` order (``store_samples``)."""
    return [(n.node_id, n.updated_at, g.index, *_sample_values(g)) for n in nodes for g in n.gpus]


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
            cursor.executemany(table.values, table.prepared([dict(zip(SAMPLE_COLUMNS, r, strict=True)) for r in rows]))
            return
        # Django's wrapper has no copy(): use the psycopg 3 cursor underneath. Binary: PostgreSQL
        # reads a group's rows in half the time it parses them as text (0.37 against 0.78 ms for
        # 96 rows), and psycopg's C code writes them for less than it formats text.
        with cursor.cursor.copy(statements.copy_samples) as copy:
            copy.set_types(statements.sample_types)
            for row in rows:
                copy.write_row(row)


def _column_db_type(model: type[models.Model], attname: str) -> str:
    """The column's type as this database names it ("real", "bigint"): what a binary COPY declares."""
    field = next(f for f in model._meta.concrete_fields if f.attname == attname)
    db_type = (field.target_field if isinstance(field, models.ForeignKey) else field).db_type(connection)
    if db_type is None:
        raise LookupError(f"{model.__name__}.{attname} has no column type")
    return db_type


def _insert_returning(cursor: Any, table: _Table, rows: Sequence[Row]) -> set[Any]:
    """One multi-row INSERT ... RETURNING (executemany cannot return rows); the first
    returned column of the rows that went in. Not for PostgreSQL, which sends JSON."""
    row = "(" + ", ".join(["%s"] * len(table.columns)) + ")"
    sql = table.values.replace(f"VALUES {row}", "VALUES " + ", ".join([row] * len(rows)), 1)
    cursor.execute(sql, [value for values in table.prepared(rows) for value in values])
    return {found[0] for found in cursor.fetchall()}


def _xids_sql() -> str:
    """PostgreSQL: the identities' insert and, for those that went in, the lines' insert,
    in one statement; returns the new fingerprints."""
    statements = _sql()
    source, end, on_conflict = statements.xids.json.partition("::jsonb)")
    fresh = " WHERE fingerprint IN (SELECT fingerprint FROM fresh)"
    return (
        f"WITH fresh AS ({statements.xid_identities.json}),"
        f" lines AS ({source}{end}{fresh}{on_conflict})"
        f" SELECT fingerprint FROM fresh"
    )


def store_xids(rows: Sequence[Row]) -> set[str]:
    """XidRecord rows (``fingerprint``: the event's identity), storing only events whose
    identity no earlier request stored; returns the fingerprints stored now.

    The identity row is the arbiter: ``ON CONFLICT DO NOTHING`` on (node, fingerprint), so
    of two concurrent requests with the same event the second waits on the first's row and
    then skips it. Rows repeating a fingerprint within ``rows`` are dropped (first kept).
    At most 500 reports of 1,000 events each: SQLite's multi-row VALUES is split in chunks.
    """
    first: dict[str, Row] = {}
    for row in rows:
        first.setdefault(row["fingerprint"], row)
    unique = list(first.values())
    if not unique:
        return set()
    identities = [{c: row[c] for c in XID_IDENTITY_COLUMNS} for row in unique]
    with bound_cursor() as cursor:
        if connection.vendor == "postgresql":
            sql = _pg_statements.get("xids") or _pg_statements.setdefault("xids", _xids_sql())
            cursor.execute(sql, [_encode(identities).decode(), _encode(unique).decode()])
            return {row[0] for row in cursor.fetchall()}
        statements, fresh = _sql(), set()
        for start in range(0, len(identities), _SQLITE_ROWS):
            fresh |= _insert_returning(cursor, statements.xid_identities, identities[start : start + _SQLITE_ROWS])
        new_rows = [row for row in unique if row["fingerprint"] in fresh]
        if new_rows:
            cursor.executemany(statements.xids.values, statements.xids.prepared(new_rows))
        return fresh


# Rows per multi-row VALUES elsewhere than PostgreSQL: 3 columns each, under SQLite's 32,766 parameters.
_SQLITE_ROWS = 5000


def upsert_gpu_states(nodes: Sequence[NodeGpus]) -> None:
    """Latest GPU rows; an existing row newer than the incoming one is left alone (a late,
    out-of-order report or a concurrent request must not roll the state back)."""
    if not nodes:
        return
    statements = _sql()
    with bound_cursor() as cursor:
        if connection.vendor != "postgresql":
            _write(cursor, statements.gpu_states, [row for node in nodes for row in node.rows()])
            return
        _stage_gpus(cursor, statements.gpu_staging, nodes)
        cursor.execute(statements.gpu_staging.upsert)


def store_gpu_readings(nodes: Sequence[NodeGpus]) -> None:
    """Every reading as a GpuSample row (``store_samples``), and those of the ``latest`` ones as the
    latest GPU rows (``upsert_gpu_states``): on PostgreSQL one COPY and one statement for both."""
    if not nodes:
        return
    if connection.vendor != "postgresql":
        upsert_gpu_states([node for node in nodes if node.latest])
        store_samples(sample_rows(nodes))
        return
    staging = _sql().gpu_staging
    with bound_cursor() as cursor:
        _stage_gpus(cursor, staging, nodes)
        with _planned_by_keys(cursor):
            cursor.execute(staging.upsert_and_sample)


# A prepared statement of the ingest (planned once per connection, its plan then kept) must find
# rows through their keys, whatever the tables' statistics say when it is planned: on a fresh
# database PostgreSQL plans hash joins over scans of whole (then small) tables, and kept, such a
# plan of the group's MERGE read all 16,000 GPU rows of the benchmark's fleet for every group
# (0.15 -> 0.24 ms of PostgreSQL a report). ``_planned_by_keys`` turns the other joins and seq
# scans off around such statements, then puts the settings back as they were. (A seq scan that
# must be one all the same, the staging table's, is then costed past jit_above_cost: a JIT
# compilation of 250 ms a group, so jit goes off too, and stays off for the transaction.)
_JOINS = ("enable_hashjoin", "enable_mergejoin", "enable_seqscan")
_BY_INDEX = "SELECT " + ", ".join(
    [f"current_setting('{name}')" for name in _JOINS]
    + [f"set_config('{name}', 'off', true)" for name in (*_JOINS, "jit")]
)
_JOINS_BACK = "SELECT " + ", ".join(f"set_config('{name}', %s, true)" for name in _JOINS)


@contextmanager
def _planned_by_keys(cursor: Any) -> Iterator[None]:
    """The statements run inside are planned (and their plans kept) with joins through keys only:
    this transaction's join and scan settings off, then back as they were; jit off for good."""
    cursor.execute(_BY_INDEX)
    before = cursor.fetchone()
    yield
    cursor.execute(_JOINS_BACK, list(before[: len(_JOINS)]))


def _stage_gpus(cursor: Any, staging: _GpuStaging, nodes: Sequence[NodeGpus]) -> None:
    cursor.execute(staging.create)
    with cursor.cursor.copy(staging.copy) as copy:  # Django's wrapper has no copy()
        copy.set_types(staging.types)
        for node in nodes:
            key = (node.node_id, node.updated_at, node.latest)
            for reading in node.gpus:
                copy.write_row((*key, *_reading_values(reading)))


def upsert_node_health(row: Row) -> None:
    """The node's latest row. Fields describing the report only move forward in time;
    ``last_received_at`` always moves (the node is alive whatever it sent)."""
    with bound_cursor() as cursor:
        _write(cursor, _sql().health, [row])


def unpin_latest(node_id: int, bound: datetime) -> datetime:
    """Pull the node's latest rows dated after ``bound`` back to the newest report in its
    history dated at most ``bound`` (else to when the portal last heard from the node),
    so that the next report replaces them; returns the node's ``last_report_at`` after.
    For a state no report may set any more (``telemetry.ingest._unpin_latest``): five
    statements, on that rare path only."""
    health = NodeHealth.objects.select_for_update().filter(node_id=node_id)
    received = health.values_list("last_received_at", flat=True).first()
    if received is None:
        return bound
    believable = NodeReport.objects.filter(node_id=node_id, collected_at__lte=bound).aggregate(
        at=models.Max("collected_at")
    )["at"]
    at = believable or min(received, bound)
    health.filter(last_report_at__gt=bound).update(last_report_at=at)
    GpuState.objects.filter(node_id=node_id, updated_at__gt=bound).update(updated_at=at)
    return health.values_list("last_report_at", flat=True).first() or at


# --- PostgreSQL: a single-report request in two statements and a COPY ---------------------

NODE_COLUMNS = (
    "id",
    "hostname",
    "hardware_profile_id",
    "hardware_profile__gpu_count",
    "health__last_report_at",
    "health__host",
    "health__ib_ports",
)
# A node's GPU rows as the rules' previous_gpus want them: GpuReading's fields, in its order (a
# row of them is GpuReading(*row)).
GPU_READ_COLUMNS = tuple(f.name for f in msgspec.structs.fields(GpuReading))

_FIELD_TYPES: dict[str, Any] = {
    "BooleanField": bool,
    "CharField": str,
    "TextField": str,
    "DateTimeField": datetime,
    "FloatField": float,
    "JSONField": Any,
    "AutoField": int,
    "BigAutoField": int,
    "IntegerField": int,
    "BigIntegerField": int,
    "PositiveIntegerField": int,
    "PositiveSmallIntegerField": int,
    "SmallIntegerField": int,
}


def _column_type(model: type[models.Model], attname: str) -> Any:
    field = next(f for f in model._meta.concrete_fields if f.attname == attname)
    kind = (field.target_field if isinstance(field, models.ForeignKey) else field).get_internal_type()
    python_type = _FIELD_TYPES[kind]
    return python_type | None if field.null and python_type is not Any else python_type


def _row_type(name: str, model: type[models.Model], columns: Sequence[str]) -> type[msgspec.Struct]:
    """A msgspec type for rows of ``model`` sent as JSON: typed like the model's fields, so the
    decoded values are those the ORM would give (floats stay floats, datetimes are aware)."""
    return msgspec.defstruct(name, [(c, _column_type(model, c)) for c in columns])


# Built at run time from the models' fields: to mypy its rows are Any.
_GpuRow: Any = _row_type("_GpuRow", GpuState, GPU_READ_COLUMNS)


def _node_row_type(extra: NodeRows | None) -> type[msgspec.Struct]:
    columns: list[tuple[str, Any]] = [
        ("id", int),
        ("hostname", str),
        ("hardware_profile_id", int | None),
        ("hardware_profile__gpu_count", int | None),
        ("health__last_report_at", datetime | None),
        ("health__host", Any),
        ("health__ib_ports", Any),
        ("gpus", list[_GpuRow] | None),
    ]
    if extra is not None:
        columns.append(("extra", list[_row_type("_ExtraRow", extra.model, extra.columns)] | None))  # type: ignore[misc]
    # read_nodes: the caller's copy of the node's latest state is still the stored one (host, ports
    # and GPU rows were not read).
    fields: list[Any] = [*columns, ("cached", bool, False)]
    return msgspec.defstruct("_NodeRow", fields)


_pg_statements: dict[str, str] = {}  # built on first use, as _sql() builds the others
# The node read per consumer's extra rows: its text and decoder, built on first use.
_node_reads: dict[Any, tuple[str, Callable[[str], Any]]] = {}


@dataclass(frozen=True)
class NodeSnapshot:
    """A node as ingest needs it: its row (``NODE_COLUMNS``), its GPU rows in index order (as
    readings: ``GPU_READ_COLUMNS``) and the extra rows its report consumer asked for (``NodeRows``:
    health's firing alerts), as tuples of their columns."""

    node: dict[str, Any]
    gpus: list[GpuReading]
    extra: list[tuple[Any, ...]]
    cached: bool = False  # read_nodes: the caller's copy is current; host, ports and GPUs not read


@dataclass(frozen=True)
class StoredAs:
    """What a node's health row said when a caller last wrote it (``read_nodes``' ``known``)."""

    last_report_at: datetime
    last_received_at: datetime


def _node_read_sql(extra: NodeRows | None, *, many: bool = False) -> str:
    """The node read: one node's row with its GPU rows, or (``many``, for ``read_nodes``) the rows
    of several nodes without their GPU rows (NULL), each with ``cached``."""
    q = connection.ops.quote_name

    def table(model: type[models.Model]) -> str:
        return q(model._meta.db_table)

    gpu_columns = ", ".join(q(c) for c in GPU_READ_COLUMNS)
    extra_rows = ""
    if extra is not None:
        extra_columns = ", ".join(q(c) for c in extra.columns)
        extra_rows = (
            f", (SELECT json_agg(a) FROM (SELECT {extra_columns} FROM {table(extra.model)}"
            f" WHERE {q('node_id')} = n.{q('id')} AND {q(extra.state_column)} = %s) a) AS extra"
        )
    host, ib_ports = f"h.{q('host')}", f"h.{q('ib_ports')}"
    if many:
        # The caller's copy of a node's state is current when the health row is still the one it
        # wrote: every write of a node's state moves last_received_at (the writer's clock, to the
        # microsecond) in the same statement or transaction as the GPU rows.
        same = f"(h.{q('last_report_at')} = c.report_at AND h.{q('last_received_at')} = c.received_at)"
        host, ib_ports = (f"CASE WHEN {same} THEN NULL ELSE {column} END" for column in (host, ib_ports))
        nodes = (
            "unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS c(id, report_at, received_at)"
            f" JOIN {table(Node)} n ON n.{q('id')} = c.id"
        )
        gpu_rows, cached, where = "NULL", f", COALESCE({same}, false) AS cached", ""
    else:
        nodes, cached, where = f"{table(Node)} n", "", f" WHERE n.{q('id')} = %s"
        gpu_rows = (
            f"(SELECT json_agg(g ORDER BY g.{q('index')}) FROM (SELECT {gpu_columns} FROM {table(GpuState)}"
            f" WHERE {q('node_id')} = n.{q('id')}) g)"
        )
    # One row as one JSON text: the subqueries' rows nest in it, and msgspec decodes it all at once.
    return (
        f"SELECT row_to_json(r)::text FROM (SELECT n.{q('id')}, n.{q('hostname')}, n.{q('hardware_profile_id')},"
        f" p.{q('gpu_count')} AS hardware_profile__gpu_count, h.{q('last_report_at')} AS health__last_report_at,"
        f" {host} AS health__host, {ib_ports} AS health__ib_ports,"
        f" {gpu_rows} AS gpus{extra_rows}{cached}"
        f" FROM {nodes} LEFT JOIN {table(HardwareProfile)} p ON p.{q('id')} = n.{q('hardware_profile_id')}"
        f" LEFT JOIN {table(NodeHealth)} h ON h.{q('node_id')} = n.{q('id')}{where}) r"
    )


def read_node(node_id: int, extra: NodeRows | None = None) -> NodeSnapshot | None:
    """PostgreSQL only: the node, its GPU rows and the ``extra`` rows in one statement (None
    if there is no such node). Reads what three ORM reads would, in one round trip."""
    if extra not in _node_reads:
        _node_reads[extra] = (_node_read_sql(extra), msgspec.json.Decoder(_node_row_type(extra)).decode)
    sql, decode = _node_reads[extra]
    with bound_cursor(binary=True, prepare=False) as cursor:
        cursor.execute(sql, [node_id] if extra is None else [extra.state, node_id])
        found = cursor.fetchone()
    if found is None:
        return None
    row = decode(found[0])
    return NodeSnapshot(
        node={c: getattr(row, c) for c in NODE_COLUMNS},
        gpus=[GpuReading(*msgspec.structs.astuple(g)) for g in row.gpus or ()],
        extra=[msgspec.structs.astuple(a) for a in getattr(row, "extra", None) or ()],
    )


def read_nodes(
    node_ids: Sequence[int], extra: NodeRows | None = None, known: Sequence[StoredAs | None] | None = None
) -> dict[int, NodeSnapshot]:
    """PostgreSQL only: ``read_node`` for many nodes (telemetry.groupcommit); a node that does not
    exist is missing from the answer. Two statements: the nodes as JSON, as ``read_node`` reads
    one, and the GPU rows of those that reported as plain rows. Built into the JSON, a group's GPU
    rows cost PostgreSQL more than the rest of the read (bench/ingest.py: 2.5 ms for 24 nodes
    against 1.4 ms as rows).

    ``known`` (one per node, or None): what the caller last wrote of the node. Where the health row
    is still that one, the snapshot is ``cached`` and holds no host, ports or GPU rows: the
    caller's copy is the stored state (telemetry.ingest's LatestCache)."""
    key = ("many", extra)
    if key not in _node_reads:
        _node_reads[key] = (_node_read_sql(extra, many=True), msgspec.json.Decoder(_node_row_type(extra)).decode)
    sql, decode = _node_reads[key]
    stored = list(known) if known is not None else [None] * len(node_ids)
    params: list[Any] = [
        array_literal(node_ids),
        array_literal([s.last_report_at if s is not None else None for s in stored]),
        array_literal([s.last_received_at if s is not None else None for s in stored]),
    ]
    # Prepared, these reads are planned once per connection and their plan kept: only joins through
    # the keys may be in it, or a plan made on a fresh database's small tables kept scanning whole
    # tables as the fleet grew (1.6 ms a group's read, not 0.4). Planned every time instead, the
    # node read cost PostgreSQL 0.24-0.34 ms a group. And a group's cost estimate can pass
    # jit_above_cost (compiling the read then took 8 ms of a group's 10): jit stays off for the rest
    # of this transaction too.
    with bound_cursor(binary=True) as cursor, _planned_by_keys(cursor):
        cursor.execute(sql, params if extra is None else [extra.state, *params])
        rows = [decode(text) for (text,) in cursor.fetchall()]
        gpus: dict[int, list[GpuReading]] = {}
        reported = [row.id for row in rows if row.health__last_report_at is not None and not row.cached]
        if reported:
            cursor.execute(_gpu_rows_sql(), [array_literal(reported)])
            for node_id, *values in cursor.fetchall():
                gpus.setdefault(node_id, []).append(GpuReading(*values))
    return {
        row.id: NodeSnapshot(
            node={c: getattr(row, c) for c in NODE_COLUMNS},
            gpus=gpus.get(row.id, []),
            extra=[msgspec.structs.astuple(a) for a in getattr(row, "extra", None) or ()],
            cached=row.cached,
        )
        for row in rows
    }


def _gpu_rows_sql() -> str:
    sql = _pg_statements.get("gpu-rows")
    if sql is None:
        q = connection.ops.quote_name
        columns = ", ".join(f"g.{q(c)}" for c in GPU_READ_COLUMNS)
        # Node by node through the (node, index) key: a LATERAL subquery with its own ORDER BY is
        # not flattened into a join, so a group of 50 nodes never turns into a scan of the whole
        # table (which the planner chose on a fleet of 2,000 nodes: 6.8 ms a group, not 1).
        sql = _pg_statements.setdefault(
            "gpu-rows",
            f"SELECT n.id, {columns} FROM unnest(%s::bigint[]) AS n(id), LATERAL (SELECT * FROM"
            f" {q(GpuState._meta.db_table)} s WHERE s.{q('node_id')} = n.id ORDER BY s.{q('index')}) g"
            f" ORDER BY n.id, g.{q('index')}",
        )
    return sql


# The health row's columns that the ingest's statements take from the report's stored summary
# rather than from the health row's own JSON (``_health_from_reports``).
HEALTH_FROM_SUMMARY = {
    "host": "COALESCE(NULLIF(r.{summary} -> 'host', 'null'::jsonb), '{{}}'::jsonb)",  # None: {}, as _health_row
    "ib_ports": "r.{summary} -> 'ib_ports'",
    "collector_errors": "r.{summary} -> 'collector_errors'",
}


def _new_reports_returning() -> str:
    """The reports' insert, returning what ``_health_from_reports`` reads of each new report."""
    q = connection.ops.quote_name
    returned = f"RETURNING {q('node_id')}, report_id, {q('collected_at')}, {q('summary')}"
    return _sql().reports.json.replace("RETURNING report_id", returned)


def _health_from_reports(reports: str) -> str:
    """The health upsert of the node rows whose report is in ``reports`` (a CTE of new report rows,
    at most one a node), from a parameter of health rows without host, IB ports and collector
    errors, matched on (node, report time): those three are the report's, read from the summary
    the insert returned. They are a report's largest JSON (about 2 kB), and PostgreSQL parsed them
    twice a report when the health rows carried them too (``jsonb_in`` was a sixth of its ingest
    CPU; bench/ingest.py). A health row whose report is not in ``reports`` (not new) writes nothing."""
    q = connection.ops.quote_name
    table, summary, node = q(NodeHealth._meta.db_table), q("summary"), q("node_id")
    names = ", ".join(q(c) for c in HEALTH_COLUMNS)
    values = ", ".join(
        HEALTH_FROM_SUMMARY[c].format(summary=summary) if c in HEALTH_FROM_SUMMARY else f"h.{q(c)}"
        for c in HEALTH_COLUMNS
    )
    return (
        f"INSERT INTO {table} ({names}) SELECT {values} FROM {reports} r"
        f" JOIN jsonb_populate_recordset(NULL::{table}, %s::jsonb) h"
        f" ON h.{node} = r.{node} AND h.{q('last_report_at')} = r.{q('collected_at')}{_health_suffix()}"
    )


def _reports_of_nodes_sql() -> str:
    """The reports' insert, and each node's health upsert from its newest new report: one statement."""
    q = connection.ops.quote_name
    node, at = q("node_id"), q("collected_at")
    return (
        f"WITH new_reports AS ({_new_reports_returning()}),"
        f" newest AS (SELECT DISTINCT ON ({node}) * FROM new_reports ORDER BY {node}, {at} DESC),"
        f" health AS ({_health_from_reports('newest')})"
        f" SELECT {node}, report_id FROM new_reports"
    )


def insert_new_reports_of_nodes(rows: Sequence[Row], healths: Sequence[Row]) -> set[tuple[int, str]]:
    """PostgreSQL only: ``insert_new_reports`` for reports of many nodes, and ``upsert_node_health``
    for each node with a new report, from its newest new one, in one statement; returns the new
    (node_id, report_id) pairs (two nodes may send the same report_id).

    ``healths``: a health row for each report of ``rows`` (its ``last_report_at`` the report's
    ``collected_at``), without host, IB ports and collector errors: the statement takes those from
    the report's summary. Which reports are new is known only once the insert has run."""
    if not rows:
        return set()
    sql = _pg_statements.get("reports-of-nodes") or _pg_statements.setdefault(
        "reports-of-nodes", _reports_of_nodes_sql()
    )
    with bound_cursor() as cursor:
        cursor.execute(sql, [_encode(rows).decode(), _encode(healths).decode()])
        return {(node_id, report_id) for node_id, report_id in cursor.fetchall()}


def _reports_with_latest_sql() -> str:
    """The reports' insert, and the latest GPU and node rows' upserts guarded by "the newest
    report was new": data-modifying CTEs, each run once whether or not it is read. The node row
    is guarded by its match with a new report (``_health_from_reports``), the GPU rows here."""
    statements = _sql()
    guard = " WHERE EXISTS (SELECT 1 FROM new_reports WHERE report_id = %s)"
    # The guard goes between the row source and the ON CONFLICT clause.
    source, on, conflict = statements.gpu_states.json.rpartition(" ON CONFLICT ")
    return (
        f"WITH new_reports AS ({_new_reports_returning()}),"
        f" gpu_states AS ({source}{guard}{on}{conflict}),"
        f" health AS ({_health_from_reports('new_reports')})"
        f" SELECT report_id FROM new_reports"
    )


def insert_reports_with_latest(
    rows: Sequence[Row], newest_id: str, gpu_states: Sequence[NodeGpus], health: Row
) -> set[str]:
    """PostgreSQL only: ``insert_new_reports``, then, if the report ``newest_id`` was new,
    ``upsert_gpu_states(gpu_states)`` and ``upsert_node_health``; one statement. ``health``: the
    newest report's health row without its JSON columns, which come from the report's summary
    (``_health_from_reports``).

    Returns the new report_ids. A caller whose newest report was a resend (so no latest
    row was written) upserts the newest *new* report's rows itself.
    """
    sql = _pg_statements.get("write") or _pg_statements.setdefault("write", _reports_with_latest_sql())
    gpu_rows = [row for node in gpu_states for row in node.rows()]
    params = [_encode(rows).decode(), _encode(gpu_rows).decode(), newest_id, _encode([health]).decode()]
    with bound_cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


@contextmanager
def savepoint_on_first_statement() -> Iterator[None]:
    """``transaction.atomic()`` (a savepoint inside the ingest transaction) whose SAVEPOINT is
    sent just before the block's first statement, if there is one.

    The health rules of a healthy report touch no table: no SAVEPOINT and RELEASE round trips.
    Any statement, a read too, opens the savepoint first: on PostgreSQL a failed read aborts
    the transaction just as a failed write does, and only a savepoint saves it. The first
    statement may come from inside an atomic block of the code under this one (a delete, a
    service): the savepoint then takes the place in Django's stack of savepoints, atomic
    blocks and on_commit callbacks that it would have had if sent at the start.
    """
    if not connection.in_atomic_block:
        with transaction.atomic():
            yield
        return
    block = transaction.atomic()
    depth, blocks, callbacks = (
        len(connection.savepoint_ids),
        len(connection.atomic_blocks),
        len(connection.run_on_commit),
    )
    opened = False

    def open_first(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal opened
        if not opened:
            opened = True  # first: the SAVEPOINT statement comes through here too
            sid = connection.savepoint()
            # sid is None where savepoints are off, and Atomic itself appends None then; the stubs say str.
            connection.savepoint_ids.insert(depth, sid)  # type: ignore[arg-type]
            connection.atomic_blocks.insert(blocks, block)
            # (savepoint ids, callback, robust) since Django 4.2; the stubs still say a pair.
            for sids, *_callback in connection.run_on_commit[callbacks:]:
                sids.add(sid)  # type: ignore[arg-type]  # registered in this block: dropped if it rolls back
        return execute(sql, params, many, context)

    with connection.execute_wrapper(open_first):
        try:
            yield
        except BaseException as exc:
            if opened:
                block.__exit__(type(exc), exc, exc.__traceback__)  # rolls back to the savepoint
            else:
                del connection.run_on_commit[callbacks:]  # what rolling back would have dropped
            raise
        if opened:
            block.__exit__(None, None, None)  # releases the savepoint
