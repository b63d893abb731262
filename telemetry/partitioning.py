"""Range partitioning by month of the history tables, for large fleets (PostgreSQL only).

The tables are designed for it (time in every primary key, nothing references them),
so switching it on is a one-off rewrite: rename, create the partitioned parent, copy,
drop the old table, restore the primary key and the BRIN index. A DEFAULT partition
catches anything outside the monthly ones; ``ensure_future_partitions`` (called by the
hourly retention task) adds next months before rows for them arrive.
"""

from __future__ import annotations

from datetime import date, datetime

from django.db import connection, transaction
from django.utils import timezone

from .models import GpuSample, NodeReport, XidRecord

MONTHS_AHEAD = 2
# table, partition column, primary key columns
TABLES = [
    (NodeReport._meta.db_table, "collected_at", ("node_id", "collected_at")),
    (GpuSample._meta.db_table, "collected_at", ("node_id", "collected_at", "gpu_index")),
    (XidRecord._meta.db_table, "observed_at", ("node_id", "observed_at", "fingerprint")),
]


def _months(first: date, count: int) -> list[date]:
    months, year, month = [], first.year, first.month
    for _ in range(count):
        months.append(date(year, month, 1))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


def _partition_ddl(table: str, month: date) -> str:
    after = _months(month, 2)[1]
    return (
        f"CREATE TABLE IF NOT EXISTS {table}_p{month:%Y_%m} PARTITION OF {table} "
        f"FOR VALUES FROM ('{month:%Y-%m-%d}') TO ('{after:%Y-%m-%d}');"
    )


def partition_ddl(*, since: date, now: datetime | None = None) -> list[str]:
    """The statements that turn each history table into monthly partitions from ``since``'s
    month to MONTHS_AHEAD months after ``now``. Run them in one transaction."""
    now = now or timezone.now()
    count = (now.year - since.year) * 12 + now.month - since.month + 1 + MONTHS_AHEAD
    statements = []
    for table, column, key in TABLES:
        old = f"{table}_unpartitioned"
        statements += [
            f"ALTER TABLE {table} RENAME TO {old};",
            f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS) PARTITION BY RANGE ({column});",
            f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT;",
            *(_partition_ddl(table, month) for month in _months(date(since.year, since.month, 1), count)),
            f"INSERT INTO {table} SELECT * FROM {old};",  # noqa: S608 - DDL from the TABLES constant and dates
            f"DROP TABLE {old};",
            f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(key)});",
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
    """Run ``partition_ddl`` in one transaction; refuses SQLite and tables already partitioned."""
    if connection.vendor != "postgresql":
        raise RuntimeError("Partitioning needs PostgreSQL.")
    if partitioned_tables():
        raise RuntimeError(f"Already partitioned: {', '.join(sorted(partitioned_tables()))}.")
    statements = partition_ddl(since=since)
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
