"""Benchmark what telemetry history costs on disk: bytes per node-day, and a year of a big fleet.

1. A node-day at the 30 s cadence for ``--nodes`` nodes: 2,880 reports per node with 8 GPUs'
   samples each and ``--xids`` XID events per node, through the real ingest
   (``telemetry.ingest.ingest_reports``, every health rule on), an hour of each node at a time,
   the nodes interleaved as a fleet's reports arrive. Then the retention beat's roll-up
   (``telemetry.retention.roll_up_and_prune``) turns the day's raw samples into hourly rows, and
   once those pass TELEMETRY_HOURLY_RETENTION_DAYS, the hours into daily rows (one per GPU and day).
2. Bytes per node-day of each history table, with its indexes and TOAST
   (``pg_total_relation_size``, less the empty table's), divided by the nodes.
3. The footprint of a fleet with the retention in place, which is what a year of it costs on
   disk once the windows are full: for each table, its bytes per node-day x the days it is kept
   (``TELEMETRY_*_RETENTION_DAYS``) x ``--fleet`` nodes, against the goal (issue 17: under 2 TB
   for 100,000 nodes) as a ratio.

Needs PostgreSQL: run it with ``bin/bench storage``.
Usage: bin/bench storage [--nodes 10] [--xids 3] [--fleet 100000] [--goal-tb 2]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ["DEBUG"] = "0"  # DEBUG keeps every query in memory

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Model  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

REPORTS_PER_DAY = 2_880  # one every 30 s
PER_CALL = 120  # an hour of one node per ingest call (an agent's buffer flushes in batches too)
APP_XIDS = (13, 31, 43)  # application faults: recorded, none starts a remediation


def tables() -> list[tuple[type[Model], str]]:
    """The history tables and the setting that says how many days each is kept."""
    from telemetry.models import GpuSample, GpuSampleDaily, GpuSampleHourly, NodeReport, XidIdentity, XidRecord

    return [
        (NodeReport, "TELEMETRY_REPORT_RETENTION_DAYS"),
        (GpuSample, "TELEMETRY_RAW_RETENTION_DAYS"),
        (XidRecord, "TELEMETRY_XID_RETENTION_DAYS"),
        (XidIdentity, "TELEMETRY_XID_RETENTION_DAYS"),
        (GpuSampleHourly, "TELEMETRY_HOURLY_RETENTION_DAYS"),
        (GpuSampleDaily, "TELEMETRY_DAILY_RETENTION_DAYS"),
    ]


def sizes() -> dict[str, int]:
    with connection.cursor() as cursor:
        out = {}
        for model, _ in tables():
            cursor.execute("SELECT pg_total_relation_size(%s)", [model._meta.db_table])
            out[model.__name__] = cursor.fetchone()[0]
    return out


def make_nodes(n: int) -> list[tuple[int, str]]:
    from fleet.models import Cluster, HardwareProfile, Site
    from nodes.models import Node

    profile = HardwareProfile.objects.create(
        name="bench-h100", gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8, memory_gb=2048
    )
    site = Site.objects.create(slug="bench", name="Bench")
    cluster = Cluster.objects.create(name="bench", site=site)
    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"store-{i:05d}",
            serial=f"S{i:08d}",
            bmc_address=f"10.9.{i // 256}.{i % 256}",
            site=site,
            cluster=cluster,
            hardware_profile=profile,
        )
        for i in range(n)
    )
    return [(node.pk, node.hostname) for node in nodes]


def ingest_day(nodes: list[tuple[int, str]], day: datetime, xids: int, seed: int) -> float:
    """The node-day of every node through the real ingest; returns the seconds it took."""
    import msgspec

    from telemetry.ingest import ingest_reports
    from telemetry.schema import AgentReport
    from telemetry.testing import make_report

    rng = random.Random(seed)
    # Which report of each node carries an XID (spread over the day).
    with_xid = {pk: dict.fromkeys(rng.sample(range(REPORTS_PER_DAY), xids), 0) for pk, _ in nodes}
    for pk in with_xid:
        for i in with_xid[pk]:
            with_xid[pk][i] = rng.choice(APP_XIDS)
    started = time.perf_counter()
    for first in range(0, REPORTS_PER_DAY, PER_CALL):
        for pk, hostname in nodes:
            batch = [
                msgspec.convert(
                    make_report(
                        hostname,
                        collected_at=day + timedelta(seconds=30 * i),
                        seed=i,
                        seq=i,
                        xid=with_xid[pk].get(i),
                        xid_gpu=i % 8,
                    ),
                    AgentReport,
                )
                for i in range(first, first + PER_CALL)
            ]
            ingest_reports(pk, batch)
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> None:
    from telemetry.retention import roll_up_and_prune

    empty = sizes()
    nodes = make_nodes(args.nodes)
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    took = ingest_day(nodes, day, args.xids, args.seed)
    raw = sizes()
    packed = packed_samples_size()
    # The retention beat once the day is past the raw window: samples become hours.
    later = day + timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS + 1, hours=1)
    rolled = roll_up_and_prune(now=later, max_batches=10**6)
    assert rolled.finished and rolled.rolled_up == args.nodes * REPORTS_PER_DAY * 8, rolled
    after = sizes()
    measured = {name: raw[name] - empty[name] for name in raw}
    measured["GpuSampleHourly"] = after["GpuSampleHourly"] - empty["GpuSampleHourly"]
    packed_hours = packed_hours_size() / args.nodes
    measured["GpuSampleDaily"] = daily_bytes_per_node_day(day, args.nodes, empty["GpuSampleDaily"]) * args.nodes
    print(
        f"PostgreSQL {connection.pg_version}; {args.nodes} nodes x 1 day at 30 s ({args.nodes * REPORTS_PER_DAY:,} "
        f"reports, 8 GPUs, {args.xids} XIDs per node) ingested in {took:.0f} s, rolled up "
        f"{rolled.rolled_up:,} samples"
    )
    print(
        f"\n{'table (with indexes)':24} {'bytes/node-day':>15} {'kept days':>10} {'year of ' + f'{args.fleet:,}':>18}"
    )
    total = 0.0
    for model, setting in tables():
        per_day = measured[model.__name__] / args.nodes
        days = getattr(settings, setting)
        footprint = per_day * days * args.fleet
        total += footprint
        print(f"{model.__name__:24} {per_day:15,.0f} {days:10d} {footprint / 1e12:15.2f} TB")
    goal = args.goal_tb * 1e12
    print(f"{'total':24} {sum(measured.values()) / args.nodes:15,.0f} {'':10} {total / 1e12:15.2f} TB")
    verdict = "met" if total < goal else "MISSED"
    print(f"\ngoal: a year of {args.fleet:,} nodes under {args.goal_tb:g} TB: {total / goal:.2f} of it ({verdict})")
    per_day = {name: n / args.nodes for name, n in measured.items()}
    raw_days = settings.TELEMETRY_RAW_RETENTION_DAYS
    year_long = sum(per_day[m.__name__] * getattr(settings, s) for m, s in tables() if m.__name__ not in _RAW)
    raw_day = per_day["GpuSample"] + per_day["NodeReport"]
    fit = (goal / args.fleet - year_long) / raw_day
    print(
        f"what-ifs: reports kept 90 days (the default before issue 17): "
        f"{(year_long + per_day['GpuSample'] * raw_days + per_day['NodeReport'] * 90) * args.fleet / 1e12:.2f} TB; "
        f"the raw window (samples and reports) that fits the goal: "
        f"{f'{fit:.1f} days' if fit > 0 else 'none (the year-long tables alone exceed it)'}"
    )
    print_roll_ups(per_day, args.fleet, packed_hours)
    packed_day = packed / args.nodes
    print(
        f"          samples packed one row per node, GPU and hour (arrays, TOAST-compressed): "
        f"{packed_day:,.0f} bytes/node-day ({per_day['GpuSample'] / packed_day:.1f}x smaller); with reports kept "
        f"the raw window too: {(year_long + (packed_day + per_day['NodeReport']) * raw_days) * args.fleet / 1e12:.2f} TB"
    )


_RAW = ("GpuSample", "NodeReport")


DAILY_NODE_DAYS = 2_000  # node-days the daily table is measured at


def daily_bytes_per_node_day(day: datetime, nodes: int, empty: int) -> float:
    """The retention beat once the day's hours pass TELEMETRY_HOURLY_RETENTION_DAYS: they become
    daily rows, 8 per node-day. So few rows fill a handful of pages (table, key, BRIN), so the
    rows are copied under other node ids up to DAILY_NODE_DAYS node-days, the same values and so
    the same row and index entry sizes (nothing is compressed), and measured there."""
    from telemetry.models import GpuSampleDaily
    from telemetry.retention import roll_up_and_prune

    later = day + timedelta(days=settings.TELEMETRY_HOURLY_RETENTION_DAYS + 1, hours=1)
    rolled = roll_up_and_prune(now=later, max_batches=10**6)
    assert rolled.finished and rolled.rolled_up_hours == nodes * 24 * 8, rolled
    copies = max(DAILY_NODE_DAYS // nodes - 1, 0)
    columns = [str(f.column) for f in GpuSampleDaily._meta.concrete_fields if f.column != "node_id"]
    table = GpuSampleDaily._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (node_id, {', '.join(columns)}) SELECT node_id + k * 10000000, {', '.join(columns)} "  # noqa: S608 - the model's table and columns
            f"FROM {table}, generate_series(1, %s) AS k ORDER BY day, node_id + k * 10000000, gpu_index",
            [copies],
        )
    return (sizes()["GpuSampleDaily"] - empty) / (nodes * (copies + 1))


def print_roll_ups(per_day: dict[str, float], fleet: int, packed_hours: float) -> None:
    """The roll-ups' year: hourly rows for their window, then daily ones, against hourly rows for a
    year (the layout before daily roll-ups) and a node-day's hours packed in one row. Each tier is
    counted for its whole window, as above: an upper bound (hours younger than the raw window are
    still raw samples)."""
    hourly, daily = per_day["GpuSampleHourly"], per_day["GpuSampleDaily"]
    hourly_days, daily_days = settings.TELEMETRY_HOURLY_RETENTION_DAYS, settings.TELEMETRY_DAILY_RETENTION_DAYS
    thinned = (hourly * hourly_days + daily * daily_days) * fleet
    print(
        f"roll-ups: hourly {hourly:,.0f} bytes/node-day x {hourly_days} days + daily {daily:,.0f} bytes/node-day "
        f"x {daily_days} days = {thinned / 1e12:.2f} TB for {fleet:,} nodes (hourly for {daily_days} days: "
        f"{hourly * daily_days * fleet / 1e12:.2f} TB; a daily row is {hourly / daily:.0f}x fewer bytes a node-day)"
    )
    print(
        f"          a node-day's hours packed in one row instead (arrays, TOAST-compressed): {packed_hours:,.0f} "
        f"bytes/node-day, {(hourly * hourly_days + packed_hours * daily_days) * fleet / 1e12:.2f} TB"
    )


def packed_samples_size() -> int:
    """What the raw samples would take packed as one row per node, GPU and hour, each metric an array
    of the hour's values in time order (PostgreSQL compresses such rows in TOAST): a layout to weigh,
    built from the stored samples and measured with its primary key, then dropped."""
    from telemetry.models import GpuSample

    table = GpuSample._meta.db_table
    metrics = [
        f.column for f in GpuSample._meta.concrete_fields if f.column not in ("node_id", "collected_at", "gpu_index")
    ]
    arrays = ", ".join(f"array_agg({c} ORDER BY collected_at) AS {c}" for c in metrics)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE bench_packed_samples AS SELECT node_id, gpu_index, date_trunc('hour', collected_at) AS hour, "  # noqa: S608 - the model's table and columns
            f"array_agg(collected_at ORDER BY collected_at) AS collected_at, {arrays} FROM {table} "
            "GROUP BY node_id, gpu_index, date_trunc('hour', collected_at)"
        )
        cursor.execute("ALTER TABLE bench_packed_samples ADD PRIMARY KEY (node_id, hour, gpu_index)")
        cursor.execute("SELECT pg_total_relation_size('bench_packed_samples')")
        size: int = cursor.fetchone()[0]
        cursor.execute("DROP TABLE bench_packed_samples")
    return size


def packed_hours_size() -> int:
    """What the hourly roll-ups would take packed as one row per node and day, each column an array
    of the day's hours by GPU and time (TOAST-compressed): the layout weighed against daily rows,
    built from the stored hours and measured with its primary key, then dropped."""
    from telemetry.models import GpuSampleHourly

    table = GpuSampleHourly._meta.db_table
    columns = [f.column for f in GpuSampleHourly._meta.concrete_fields if f.column not in ("node_id", "hour")]
    arrays = ", ".join(f"array_agg({c} ORDER BY gpu_index, hour) AS {c}" for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE bench_packed_hours AS SELECT node_id, date_trunc('day', hour) AS day, "  # noqa: S608 - the model's table and columns
            f"array_agg(hour ORDER BY gpu_index, hour) AS hour, {arrays} FROM {table} "
            "GROUP BY node_id, date_trunc('day', hour)"
        )
        cursor.execute("ALTER TABLE bench_packed_hours ADD PRIMARY KEY (node_id, day)")
        cursor.execute("SELECT pg_total_relation_size('bench_packed_hours')")
        size: int = cursor.fetchone()[0]
        cursor.execute("DROP TABLE bench_packed_hours")
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10, help="nodes whose day is ingested and measured")
    parser.add_argument("--xids", type=int, default=3, help="XID events per node-day")
    parser.add_argument("--fleet", type=int, default=100_000, help="fleet size of the projection")
    parser.add_argument("--goal-tb", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        if connection.vendor != "postgresql":
            raise SystemExit("bench/storage.py measures PostgreSQL's sizes: run it with bin/bench storage")
        run(args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
