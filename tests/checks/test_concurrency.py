"""Races on the real PostgreSQL server: overlapping agent polls and simultaneous requests.

Eight threads, each with its own connection, wait at a barrier and then act at once.
SQLite serialises writers, so only PostgreSQL can show a lost update here.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from checks import services
from nodes.choices import RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from tests.conftest import IN_CI, require_service
from tests.factories import NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.postgres
WORKERS = 8
ROUNDS = 3


@pytest.fixture
def real_postgres(transactional_db: None) -> None:
    require_service("DATABASE_URL", "PostgreSQL")
    if connection.vendor != "postgresql":
        message = f"DATABASE_URL points at {connection.vendor}, not PostgreSQL"
        pytest.fail(message) if IN_CI else pytest.skip(message)


def race(work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in WORKERS threads released together; a refusal is returned, not raised."""
    start_line = threading.Barrier(WORKERS)

    def attempt(index: int) -> Any:
        try:
            connection.ensure_connection()  # before the barrier: set-up must not stagger the start
            start_line.wait(timeout=30)
            return work(index)
        except services.CheckConflict as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(attempt, range(WORKERS)))


@pytest.mark.usefixtures("real_postgres")
def test_of_eight_overlapping_agent_polls_each_run_is_handed_out_exactly_once():
    for round_ in range(ROUNDS):
        node = NodeFactory(production=True)
        report_health(node, processes=0)
        queued = [
            services.request_check(node.pk, kind, actor=Actor.system("tests"), reason="race").pk
            for kind in ("gpu_stress", "dcgm_diag", "nccl_test", "memory_test")
        ]

        claims = race(lambda i, node_id=node.pk: [run.pk for run in services.claim_checks_for_agent(node_id).runs])

        handed_out = sorted(itertools.chain.from_iterable(claims))
        assert handed_out == sorted(queued), f"round {round_}: {claims}"
        assert set(Run.objects.filter(node=node).values_list("status", flat=True)) == {RunStatus.RUNNING}


@pytest.mark.usefixtures("real_postgres")
def test_of_eight_simultaneous_requests_for_the_same_check_exactly_one_is_queued():
    for round_ in range(ROUNDS):
        node = NodeFactory(production=True)

        outcomes = race(
            lambda i, node_id=node.pk: services.request_check(
                node_id, "dcgm_diag", actor=Actor.system(f"op-{i}"), reason=f"race {i}"
            )
        )

        winners = [o for o in outcomes if isinstance(o, Run)]
        assert len(winners) == 1, f"round {round_}: {outcomes}"
        assert all(isinstance(o, services.CheckConflict) for o in outcomes if o not in winners)
        assert Run.objects.filter(node=node).count() == 1
        assert NodeEvent.objects.filter(node=node).count() == 1  # refused requests left no history
