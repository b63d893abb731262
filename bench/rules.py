"""Benchmark the health rules' CPU per report, screened against every rule run (issue 17).

What it measures, in one run (compare the ratios, not the microseconds across machines):
(a) one healthy 8-GPU H100 report (telemetry.testing.make_report, with the node's previous
    report as ingest hands it over), evaluated with every rule on: CPU microseconds a report
    with the rule screens (health.rules.base.screen) and with every rule run on every GPU and
    port, as before the screens, and the ratio;
(b) a group commit's share: 50 such reports of 50 nodes, each through ingest's per-node
    ``_evaluate`` (savepoint on first statement) inside one transaction, as
    ``telemetry.ingest.ingest_many`` runs them; the same two ways;
(c) the statements the rules send for that healthy group (goal 0).
The two roads alternate in rounds and each figure is the median round's, in process CPU time
(time.process_time), so other work on the machine moves them less than wall time would.

Runs in a throwaway test database on whatever DATABASE_URL names (SQLite in memory when
unset; bin/bench rules gives it PostgreSQL). Usage: bin/bench rules [--rounds 15] [--reports 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ["DEBUG"] = "0"  # DEBUG keeps every query in memory and would skew the figures

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GROUP = 50


def healthy_contexts(count: int) -> list[Any]:
    """One healthy report for each of ``count`` nodes, with the previous report 30 s before it."""
    import msgspec

    from bench.place import h100_place
    from nodes.models import Node
    from telemetry.ingest import _contexts, _state_of
    from telemetry.schema import AgentReport
    from telemetry.testing import make_report

    profile, site, cluster = h100_place()
    contexts = []
    for i in range(count):
        node = Node.objects.create(
            hostname=f"rules-{i:03d}", serial=f"RULES{i:05d}", site=site, cluster=cluster, hardware_profile=profile
        )
        before, now = (
            msgspec.convert(make_report(node.hostname, collected_at=at, seed=seed), AgentReport)
            for at, seed in ((T0, 2 * i), (T0 + timedelta(seconds=30), 2 * i + 1))
        )
        row = {"id": node.pk, "hostname": node.hostname, "hardware_profile_id": profile.pk}
        row["hardware_profile__gpu_count"] = profile.gpu_count
        contexts += _contexts(row, [now], _state_of(before), "agent")
    return contexts


def cpu_per_call(fn: Callable[[], None], repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat


def compare(label: str, runs: dict[str, Callable[[], None]], repeat: int, rounds: int, per: int) -> dict[str, float]:
    """Median-round CPU microseconds a report of each road, the roads alternating round by round."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()  # warm: the rule cache, the plan, the compiled screens
    for _ in range(rounds):
        for name, fn in runs.items():
            samples[name].append(cpu_per_call(fn, repeat) / per * 1e6)
    figures = {name: statistics.median(values) for name, values in samples.items()}
    old, new = figures["every rule run"], figures["screened"]
    print(f"{label}:")
    for name, value in figures.items():
        print(f"  {name:>15}: {value:8.1f} us a report")
    print(f"  every rule run / screened: {old / new:.1f}x (goal >= 4x)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reports", type=int, default=400, help="reports a round, per road (a)")
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        run(args.rounds, args.reports)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(rounds: int, reports: int) -> None:
    from health.evaluation import evaluate_reports
    from telemetry.ingest import _evaluate

    print(f"database: {connection.vendor}; every health rule enabled (the seeded defaults)")
    contexts = healthy_contexts(GROUP)
    one = contexts[0]
    compare(
        "(a) one healthy 8-GPU report, evaluate_reports",
        {
            "every rule run": lambda: evaluate_reports([one], firing=[], screened=False),
            "screened": lambda: evaluate_reports([one], firing=[]),
        },
        reports,
        rounds,
        1,
    )

    def group(screened: bool) -> Callable[[], None]:
        """ingest_many's rules loop over the group: the registered consumer (screened), or
        one that runs every rule on every report and never says it is quiet (as before)."""
        from telemetry import consumers

        registered = consumers.CONSUMER
        assert registered is not None
        everything = replace(registered, evaluate=partial(evaluate_reports, screened=False))

        def one_group() -> None:
            consumers.CONSUMER = registered if screened else everything
            try:
                with transaction.atomic():  # ingest_many's transaction: savepoints are sent only if used
                    for ctx in contexts:
                        _evaluate(ctx.node_id, [ctx], "agent", [])
            finally:
                consumers.CONSUMER = registered

        return one_group

    compare(
        f"(b) a group of {GROUP} healthy reports of {GROUP} nodes, ingest's per-node _evaluate",
        {"every rule run": group(False), "screened": group(True)},
        max(1, reports // GROUP),
        rounds,
        GROUP,
    )
    with CaptureQueriesContext(connection) as queries:
        group(True)()
    rules_sql = [q for q in queries if q["sql"].split()[0] not in ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")]
    print(f"(c) statements from the rules for the healthy group of {GROUP}: {len(rules_sql)} (goal 0)")


if __name__ == "__main__":
    main()
