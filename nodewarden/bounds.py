"""What the database can store, said once: integer column ranges and timestamp offsets.

Input is checked against these where it is decoded (serializers, filters, the agent's
msgspec schema), so a value the database would refuse is a 400 naming the field, never
a database error (a 500).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# PostgreSQL's integer types (SQLite stores 64 bits for all of them).
SMALLINT_MAX = 2**15 - 1  # PositiveSmallIntegerField, SmallIntegerField
INT_MAX = 2**31 - 1  # IntegerField, PositiveIntegerField, AutoField
BIGINT_MAX = 2**63 - 1  # BigIntegerField, BigAutoField (every primary key here)
BIGINT_MIN = -(2**63)

# No clock is past UTC+14:00; PostgreSQL refuses an offset beyond ±15:59.
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)


def timestamp_problem(value: datetime) -> str | None:
    """Why ``value`` cannot be stored or compared in the database, or None if it can.

    An aware time must have an offset PostgreSQL accepts and must still be a date in UTC
    (year 1 at +01:00 is year 0 in UTC).
    """
    offset = value.utcoffset()
    if not offset:
        return None
    if abs(offset) > MAX_UTC_OFFSET:
        return f"UTC offset {value:%z} of {value.isoformat()} is out of range (at most ±15:59)"
    try:
        value.astimezone(UTC)
    except OverflowError:
        return f"{value.isoformat()} is out of range in UTC"
    return None
