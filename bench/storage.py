"""Benchmark what telemetry history costs on disk: bytes per node-day, and a year of a big fleet.

1. A node-day at the 30 s cadence for ``--nodes`` nodes: 2,880 reports per node with 8 GPUs'
   samples each and ``--xids`` XID events per node, through the real ingest
   (``telemetry.ingest.ingest_reports``, every health rule on), an hour of each node at a time,
   the nodes interleaved as a fleet's reports arrive, readings drifting slowly at nvidia-smi's
   precision (``realistic``). Then the packing beat (``telemetry.packing.pack_past_hours``) rolls
   each hour up and packs each node-hour into one row, deleting the raw rows; its CPU time per
   node-hour is printed, and that of reading the packs back. Once the hours pass
   TELEMETRY_HOURLY_RETENTION_DAYS the retention beat rolls them into daily rows (one per GPU and
   day), measured at ``DAILY_NODE_DAYS`` node-days.
2. Bytes per node-day of each history table, with its indexes and TOAST
   (``pg_total_relation_size``, less the empty table's), divided by the nodes: the raw rows
   before packing -> the packs after (and hourly roll-ups kept a year -> hourly for their window,
   then daily rows).
3. The footprint of a fleet with the retention in place, which is what a year of it costs on
   disk once the windows are full: for each table, its bytes per node-day x the days it is kept
   (``TELEMETRY_*_RETENTION_DAYS``) x ``--fleet`` nodes, against the goal (issue 17: under 2 TB
   for 100,000 nodes) as a ratio.

Needs PostgreSQL: run it with ``bin/bench storage``.
Usage: bin/bench storage [--nodes 10] [--xids 3] [--fleet 100000] [--goal-tb 2]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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


def sizes() -> dict[str, int]:
    with connection.cursor() as cursor:
        out = {}
        for model, _ in tables():
            cursor.execute("SELECT pg_total_relation_size(%s)", [model._meta.db_table])
            out[model.__name__] = cursor.fetchone()[0]
    return out


def make_nodes(n: int) -> list[tuple[int, str]]:
    from bench.place import h100_place
    from nodes.models import Node

    profile, site, cluster = h100_place()
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
                    realistic(
                        make_report(
                            hostname,
                            collected_at=day + timedelta(seconds=30 * i),
                            seed=i,
                            seq=i,
                            xid=with_xid[pk].get(i),
                            xid_gpu=i % 8,
                        ),
                        pk,
                        i,
                    ),
                    AgentReport,
                )
                for i in range(first, first + PER_CALL)
            ]
            ingest_reports(pk, batch)
    return time.perf_counter() - started


def realistic(report: dict[str, Any], node: int, i: int) -> dict[str, Any]:
    """``make_report`` draws each GPU's load afresh every 30 s, to the tenth of a unit; a GPU's
    readings drift slowly and nvidia-smi prints temperatures, utilisation, clocks and MiB as
    integers and watts with two decimals. Same node, GPU and instant, same values."""
    for gpu in report["gpus"]:
        # A load that moves over minutes (jobs) with a little jitter, per node and GPU.
        phase = (node * 8 + gpu["index"]) * 0.7
        load = 0.5 + 0.45 * math.sin(i / 90 + phase) + 0.02 * math.sin(i * 1.7 + phase)
        temp = 35 + 35 * load
        gpu["temperature_c"] = float(round(temp))
        gpu["hbm_temperature_c"] = float(round(temp + 3))
        gpu["power_w"] = round(100 + 550 * load + (i * 37 + gpu["index"] * 11) % 100 / 100, 2)
        gpu["utilization_pct"] = float(round(100 * load))
        gpu["memory_used_mib"] = int(80_000 * load) // 64 * 64
        gpu["sm_clock_mhz"] = 1980 if load > 0.2 else 345
    return report


def run(args: argparse.Namespace) -> None:
    from telemetry.models import TelemetryHourPack
    from telemetry.packing import pack_past_hours, packed_columns
    from telemetry.retention import roll_up_and_prune

    empty = sizes()
    nodes = make_nodes(args.nodes)
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    took = ingest_day(nodes, day, args.xids, args.seed)
    raw = sizes()
    # The packing beat once the day's hours are past: roll-ups, then one row per node-hour.
    cpu = time.process_time()
    packed = pack_past_hours(now=day + timedelta(days=1, hours=1), max_batches=10**6)
    pack_cpu = time.process_time() - cpu
    assert packed.finished and packed.samples == args.nodes * REPORTS_PER_DAY * 8, packed
    after = sizes()
    cpu = time.process_time()
    packs = list(TelemetryHourPack.objects.all())
    decoded = sum(len(decode_samples(p)) for p in packs)
    read_cpu = time.process_time() - cpu
    cpu = time.process_time()
    # What the trends' daily evaluation decodes: five columns (charts: six).
    names = ["ecc_aggregate_corrected", "remapped_rows_correctable", "remapped_rows_uncorrectable"]
    names += ["utilization_pct", "temperature_c"]
    span = {"since": day, "until": day + timedelta(days=1), "now": day + timedelta(days=1)}
    columns = sum(len(at) for _, _, at, _ in packed_columns(nodes[0][0], nodes[-1][0], names, **span))
    columns_cpu = time.process_time() - cpu
    # The retention beat past the raw window: nothing raw is left to roll up.
    rolled = roll_up_and_prune(now=day + timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS + 1, hours=1))
    assert rolled.rolled_up == 0, rolled
    before = {name: raw[name] - empty[name] for name in raw}
    before["GpuSampleHourly"] = after["GpuSampleHourly"] - empty["GpuSampleHourly"]
    before["TelemetryHourPack"] = 0
    now = dict(
        before, GpuSample=0, NodeReport=0, TelemetryHourPack=after["TelemetryHourPack"] - empty["TelemetryHourPack"]
    )
    # Before issue 17's thinning, hourly roll-ups were kept the daily table's year and no day was rolled up.
    before["GpuSampleDaily"] = 0
    now["GpuSampleDaily"] = daily_bytes_per_node_day(day, args.nodes, empty["GpuSampleDaily"]) * args.nodes
    node_hours = args.nodes * 24
    print(
        f"PostgreSQL {connection.pg_version}; {args.nodes} nodes x 1 day at 30 s ({args.nodes * REPORTS_PER_DAY:,} "
        f"reports, 8 GPUs, {args.xids} XIDs per node, readings as nvidia-smi prints them) ingested in {took:.0f} s; "
        f"packed {packed.packs:,} node-hours ({packed.samples:,} samples) in {pack_cpu / node_hours * 1000:.1f} CPU ms "
        f"per node-hour (rolled up in the same run); read back {decoded:,} samples at "
        f"{read_cpu / node_hours * 1000:.1f} CPU ms per node-hour (rows), {columns:,} samples' five columns "
        f"at {columns_cpu / node_hours * 1000:.1f} (charts finer than an hour; the trends read the hourly roll-ups)"
    )
    goal = args.goal_tb * 1e12
    print(
        f"\n{'table (with indexes)':24} {'bytes/node-day':>22} {'kept days':>10} {'year of ' + f'{args.fleet:,}':>24}"
    )
    totals = [0.0, 0.0]
    for model, setting in tables():
        name, days = model.__name__, getattr(settings, setting)
        old, new = before[name] / args.nodes, now[name] / args.nodes
        old_days = settings.TELEMETRY_DAILY_RETENTION_DAYS if name == "GpuSampleHourly" else days
        totals[0] += old * old_days * args.fleet
        totals[1] += new * days * args.fleet
        print(
            f"{name:24} {old:10,.0f} -> {new:9,.0f} {days:10d} "
            f"{old * old_days * args.fleet / 1e12:9.2f} -> {new * days * args.fleet / 1e12:6.2f} TB"
        )
    print(f"{'total':24} {'':33} {totals[0] / 1e12:19.2f} -> {totals[1] / 1e12:6.2f} TB")
    raw_window = now["TelemetryHourPack"] / args.nodes
    print(
        f"\nthe raw window packed: {raw_window:,.0f} bytes/node-day (rows: "
        f"{(before['GpuSample'] + before['NodeReport']) / args.nodes:,.0f}), "
        f"{raw_window * settings.TELEMETRY_RAW_RETENTION_DAYS * args.fleet / 1e12:.2f} TB for "
        f"{settings.TELEMETRY_RAW_RETENTION_DAYS} days of {args.fleet:,} nodes; the blobs alone "
        f"{sum(len(p.blob) for p in packs) / args.nodes:,.0f} bytes/node-day, "
        f"{sum(len(p.blob) for p in packs) / len(packs):,.0f} per node-hour"
    )
    verdict = "met" if totals[1] < goal else "MISSED"
    print(f"goal: a year of {args.fleet:,} nodes under {args.goal_tb:g} TB: {totals[1] / goal:.2f} of it ({verdict})")


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
            f"INSERT INTO {table} (node_id, {', '.join(columns)}) SELECT node_id + k * 1000000, {', '.join(columns)} "  # noqa: S608 - the model's table and columns
            f"FROM {table}, generate_series(1, %s) AS k ORDER BY day, node_id + k * 1000000, gpu_index",
            [copies],
        )
    return (sizes()["GpuSampleDaily"] - empty) / (nodes * (copies + 1))


def decode_samples(pack: Any) -> list[dict[str, Any]]:
    from telemetry import packformat, packing

    return packformat.decode(pack.hour, bytes(pack.blob), packing.columns())[1]


def tables() -> list[tuple[type[Model], str]]:
    """The history tables and the setting that says how many days each is kept."""
    from telemetry.models import (
        GpuSample,
        GpuSampleDaily,
        GpuSampleHourly,
        NodeReport,
        TelemetryHourPack,
        XidIdentity,
        XidRecord,
    )

    return [
        (NodeReport, "TELEMETRY_REPORT_RETENTION_DAYS"),
        (GpuSample, "TELEMETRY_RAW_RETENTION_DAYS"),
        (TelemetryHourPack, "TELEMETRY_RAW_RETENTION_DAYS"),
        (XidRecord, "TELEMETRY_XID_RETENTION_DAYS"),
        (XidIdentity, "TELEMETRY_XID_RETENTION_DAYS"),
        (GpuSampleHourly, "TELEMETRY_HOURLY_RETENTION_DAYS"),
        (GpuSampleDaily, "TELEMETRY_DAILY_RETENTION_DAYS"),
    ]


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
