"""Benchmark the lifecycle core: transition throughput and page cost against fleet size.

Prints figures as ratios measured in one run, so they compare across machines:
- a full service-layer transition (row lock, FSM check, save, history row,
  on-commit queueing) against a bare single-row UPDATE;
- the node list, node detail and fleet overview with 50 vs 500 nodes (query count
  and wall time), which should stay flat because pages are paginated and bounded.

Runs in a throwaway test database on whatever DATABASE_URL names (SQLite in memory
when unset). Usage: .venv/bin/python bench/lifecycle.py [--transitions 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "false")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402


def _timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def bench_transitions(n: int) -> None:
    from unittest import mock

    from nodes import services
    from nodes.models import Node
    from tests.factories import NodeFactory

    node = NodeFactory(state="production")
    actor = services.Actor.system("bench")
    # The broker is not what is measured: queueing the follow-up is replaced by a no-op.
    with mock.patch("nodes.services._queue_followup"):

        def cycle() -> None:
            services.request_drain(node.pk, actor=actor, reason="bench")
            services.cancel_drain(node.pk, actor=actor, reason="bench")

        per_cycle = _timed(cycle, n // 2)
    bare = _timed(lambda: Node.objects.filter(pk=node.pk).update(rack_unit=1), n)
    per_transition = per_cycle / 2
    print(f"transition via services: {per_transition * 1e3:.3f} ms ({1 / per_transition:,.0f}/s)")
    print(f"bare single-row UPDATE:  {bare * 1e3:.3f} ms ({1 / bare:,.0f}/s)")
    print(f"ratio transition/UPDATE: {per_transition / bare:.1f}x")


def bench_pages(sizes: tuple[int, ...]) -> None:
    from django.contrib.auth.models import Group
    from django.test import Client

    from nodes import services
    from tests.factories import ClusterFactory, NodeFactory, UserFactory

    user = UserFactory(username="bench-operator", is_staff=True)
    user.groups.add(Group.objects.get(name="Operators"))
    client = Client()
    client.force_login(user)
    actor = services.Actor.system("bench")
    first = None
    results: dict[int, dict[str, tuple[int, float]]] = {}
    made = 0
    clusters = ClusterFactory.create_batch(4)
    for size in sizes:
        for i in range(size - made):
            node = NodeFactory(state="production", cluster=clusters[i % 4])
            first = first or node
            services.record_event(node.pk, "note", actor=actor, reason="bench")
        made = size
        results[size] = {}
        for name, url in (("node list", "/nodes/"), ("node detail", f"/nodes/{first.pk}/"), ("overview", "/")):
            queries: list[str] = []
            # Django resets connection.queries at each request start, so count with a wrapper.
            with connection.execute_wrapper(lambda ex, sql, *a, seen=queries: (seen.append(sql), ex(sql, *a))[1]):
                client.get(url)
            times = [_timed(lambda u=url: client.get(u), 1) for _ in range(7)]
            results[size][name] = (len(queries), statistics.median(times))
    small, large = sizes[0], sizes[-1]
    for name in results[small]:
        (q1, t1), (q2, t2) = results[small][name], results[large][name]
        print(
            f"{name:12} {small} nodes: {q1} queries {t1 * 1e3:.1f} ms | {large} nodes: {q2} queries "
            f"{t2 * 1e3:.1f} ms | time ratio {t2 / t1:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=2000)
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        print(f"database: {connection.vendor}")
        bench_transitions(args.transitions)
        bench_pages((50, 500))
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
