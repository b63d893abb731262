"""Range partitioning by month of the history tables, for large fleets (PostgreSQL only).

The tables are designed for it (time in every primary key, nothing references them),
so switching it on is a one-off rewrite: rename, create the partitioned parent, copy,
drop the old table, restore the primary key and the BRIN index. A DEFAULT partition
catches anything outside the monthly ones; ``ensure_future_partitions`` (called by the
hourly retention task) adds next months before rows for them arrive, and
``drop_expired_partitions`` (called by retention) drops whole months past their table's
window: one catalogue change instead of deleting a month of rows one by one.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from .models import GpuSample, GpuSampleDaily, NodeReport, XidRecord

MONTHS_AHEAD = 2
# table -> the setting naming how many days its rows are kept
WINDOWS = {
    NodeReport._meta.db_table: "TELEMETRY_REPORT_RETENTION_DAYS",
    GpuSample._meta.db_table: "TELEMETRY_RAW_RETENTION_DAYS",
    XidRecord._meta.db_table: "TELEMETRY_XID_RETENTION_DAYS",
    GpuSampleDaily._meta.db_table: "TELEMETRY_DAILY_RETENTION_DAYS",
}
_MONTHLY = re.compile(r"_p(\d{4})_(\d{2})$")
# table, partition column, primary key columns (none: the table's B-tree is a plain index, below)
TABLES = [
    (NodeReport._meta.db_table, "collected_at", ("node_id", "collected_at")),
    (GpuSample._meta.db_table, "collected_at", ()),
    (XidRecord._meta.db_table, "observed_at", ("node_id", "observed_at", "fingerprint")),
    (GpuSampleDaily._meta.db_table, "day", ("node_id", "day", "gpu_index")),
]
# GpuSample has no primary key on PostgreSQL (telemetry migration 0009): its (node, time) index.
_PLAIN_INDEXES = {
    GpuSample._meta.db_table: "CREATE INDEX IF NOT EXISTS gpusample_node_time ON {table} (node_id, collected_at);"
}


def _months(first: date, count: int) -> list[date]:
    months, year, month = [], first.year, first.month
    for _ in range(count):
        months.append(date(year, month, 1))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


# Storage parameters of a table's partitions (a partitioned table has none of its own): a report
# row stays whole on its page, uncompressed (telemetry migration 0014).
_STORAGE = {NodeReport._meta.db_table: " WITH (toast_tuple_target = 8160)"}


def _partition_ddl(table: str, month: date) -> str:
    after = _months(month, 2)[1]
    return (
        f"CREATE TABLE IF NOT EXISTS {table}_p{month:%Y_%m} PARTITION OF {table} "
        f"FOR VALUES FROM ('{month:%Y-%m-%d}') TO ('{after:%Y-%m-%d}'){_STORAGE.get(table, '')};"
    )


def partition_ddl(
    *, since: date, now: datetime | None = None, skip: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """The statements that turn each history table (but those in ``skip``) into monthly partitions
    from ``since``'s month to MONTHS_AHEAD months after ``now``. Run them in one transaction."""
    now = now or timezone.now()
    count = (now.year - since.year) * 12 + now.month - since.month + 1 + MONTHS_AHEAD
    statements = []
    for table, column, key in TABLES:
        if table in skip:
            continue
        old = f"{table}_unpartitioned"
        statements += [
            f"ALTER TABLE {table} RENAME TO {old};",
            f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS) PARTITION BY RANGE ({column});",
            f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT;",
            *(_partition_ddl(table, month) for month in _months(date(since.year, since.month, 1), count)),
            f"INSERT INTO {table} SELECT * FROM {old};",  # noqa: S608 - DDL from the TABLES constant and dates
            f"DROP TABLE {old};",
            f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(key)});"
            if key
            else _PLAIN_INDEXES[table].format(table=table),
            f"CREATE INDEX IF NOT EXISTS {table.removeprefix('telemetry_')}_time_brin ON {table} USING brin ({column});",
        ]
    return statements


def partitioned_tables() -> set[str]:
    """History tables that are partitioned already (empty on SQLite)."""
    if connection.vendor != "postgresql":
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid")
        return {row[0] for row in cursor.fetchall()} & {t for t, _, _ in TABLES}


def apply_partitioning(*, since: date) -> list[str]:
    """Run ``partition_ddl`` in one transaction for the tables not partitioned yet (a history table
    added after an install was partitioned, as GpuSampleDaily was); refuses SQLite, and refuses when
    every table is partitioned already."""
    if connection.vendor != "postgresql":
        raise RuntimeError("Partitioning needs PostgreSQL.")
    done = partitioned_tables()
    if len(done) == len(TABLES):
        raise RuntimeError(f"Already partitioned: {', '.join(sorted(done))}.")
    statements = partition_ddl(since=since, skip=done)
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    return statements


def ensure_future_partitions(now: datetime | None = None) -> int:
    """Create this month's and the next MONTHS_AHEAD months' partitions where missing."""
    tables = partitioned_tables()
    if not tables:
        return 0
    now = now or timezone.now()
    months = _months(date(now.year, now.month, 1), MONTHS_AHEAD + 1)
    with connection.cursor() as cursor:
        for table in sorted(tables):
            for month in months:
                cursor.execute(_partition_ddl(table, month))
    return len(tables) * len(months)


def _monthly_partitions(table: str) -> dict[str, date]:
    """The monthly partitions of ``table`` (name -> first day of the month); DEFAULT is not one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {
        name: date(int(m.group(1)), int(m.group(2)), 1)
        for name in names
        if name.startswith(f"{table}_p") and (m := _MONTHLY.search(name))
    }


def drop_expired_partitions(now: datetime | None = None) -> list[str]:
    """Drop the monthly partitions whose whole month is older than their table's window; returns
    their names. Raw samples are rolled up before they may go: a sample partition is dropped only
    once empty (retention rolls and deletes its rows first), so no hour is lost from the roll-ups."""
    now = now or timezone.now()
    dropped = []
    for table in sorted(partitioned_tables()):
        cutoff = now - timedelta(days=getattr(settings, WINDOWS[table]))
        for name, month in sorted(_monthly_partitions(table).items()):
            # The bounds were written as dates, read in the connection's time zone (UTC, TIME_ZONE).
            end = datetime.combine(_months(month, 2)[1], datetime.min.time(), tzinfo=UTC)
            if end > cutoff or (table == GpuSample._meta.db_table and _holds_rows(name)):
                continue
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE {connection.ops.quote_name(name)}")
            dropped.append(name)
    return dropped


def _holds_rows(partition: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(partition)})")  # noqa: S608 - a partition name read from the catalogue
        return bool(cursor.fetchone()[0])
