"""A real Celery worker on the real Redis broker and the PostgreSQL test database.

The worker is a subprocess started the way a deployment starts it
(``celery -A nodewarden worker`` on all four queues). Its settings come from the
environment, pointing at the test database pytest-django created for this xdist
worker and at a Redis database of this xdist worker's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import kombu.pools
import pytest
import redis
from django.conf import settings

from fleet.choices import SchedulerKind
from nodes import services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import Node, NodeEvent, Run, StateCountSnapshot
from nodes.tasks import run_transition_followup, snapshot_state_counts
from nodewarden.celery import QUEUE_NAMES, app
from tests.factories import ClusterFactory, NodeFactory, TenantFactory

from .conftest import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

S = NodeState
ACTOR = services.Actor.system("infra-test")
TIMEOUT = 60  # seconds; a follow-up chain takes well under one on an idle machine


class Worker:
    """A running ``celery worker`` subprocess and its log."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc, self.log_path = proc, log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def explain(self) -> str:
        state = "running" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        return f"worker {state}; its log ends:\n" + "\n".join(self.log().splitlines()[-40:])

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"the Celery worker died\n{self.explain()}")
        return True

    def finished(self, task_id: str) -> str | None:
        """The worker's log line for the end of task ``task_id``, if it has ended."""
        for line in self.log().splitlines():
            if f"[{task_id}]" in line and (" succeeded in " in line or " raised " in line):
                return line
        return None

    def wait_for_task(self, task_id: str) -> str:
        wait_until(
            lambda: self.alive() and self.finished(task_id) is not None,
            timeout=TIMEOUT,
            what=f"task {task_id}",
            explain=self.explain,
        )
        line = self.finished(task_id) or ""
        assert " succeeded in " in line, line
        return line


def private_redis_url(base: str, worker_id: str) -> str:
    """Redis database 8-15 by xdist worker: gw0 and gw1 must never consume each other's
    messages, since event ids overlap between their test databases."""
    index = int(worker_id[2:]) if worker_id.startswith("gw") else 0
    return urlunsplit(urlsplit(base)._replace(path=f"/{8 + index % 8}"))


def database_url(db: dict[str, Any]) -> str:
    user, password = quote(db["USER"] or "", safe=""), quote(str(db["PASSWORD"] or ""), safe="")
    return f"postgresql://{user}:{password}@{db['HOST']}:{db['PORT']}/{quote(db['NAME'])}"


def forget_broker_connections() -> None:
    # Celery caches its connection and producer pools on first use; dropping them makes
    # the next publish connect to whatever broker_url says now.
    kombu.pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker_url(real_redis_url: str, worker_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point this process's Celery app at a private, emptied Redis database."""
    url = private_redis_url(real_redis_url, worker_id)
    redis.Redis.from_url(url).flushdb()  # no stale messages from an earlier, failed test
    # Celery reads the CELERY_BROKER_URL environment variable before its own configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    saved = app.conf.broker_url, app.conf.task_always_eager
    app.conf.broker_url, app.conf.task_always_eager = url, False
    forget_broker_connections()
    yield url
    app.conf.broker_url, app.conf.task_always_eager = saved
    forget_broker_connections()  # monkeypatch restores the environment right after this


@pytest.fixture
def celery_worker(real_postgres: dict[str, Any], broker_url: str, tmp_path: Path, worker_id: str) -> Iterator[Worker]:
    """``celery worker`` on all four queues, one task at a time, stopped after the test."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(real_postgres),
        # Close the connection after each task: pytest-django truncates, then drops, this database.
        "DB_CONN_MAX_AGE": "0",
        "REDIS_URL": broker_url,
        "CELERY_BROKER_URL": broker_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "NODEWARDEN_VAR_DIR": str(tmp_path / "var"),
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "nodewarden",
        "worker",
        "--queues",
        ",".join(QUEUE_NAMES),
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
        "--hostname",
        f"infra-{worker_id}@%h",
        # No cluster chatter: start at once, and never talk to another test run's worker.
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    worker = Worker(proc, log_path)
    try:
        wait_until(
            lambda: worker.alive() and " ready." in worker.log(),
            timeout=TIMEOUT,
            what="the Celery worker to start",
            explain=worker.explain,
        )
        yield worker
    finally:
        proc.terminate()  # warm shutdown
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drain_through_the_worker(worker: Worker) -> tuple[Node, list[NodeEvent]]:
    """Request a drain on a node without a workload scheduler; wait for the worker to finish it."""
    node = NodeFactory(production=True, cluster__scheduler_kind=SchedulerKind.NONE)
    services.request_drain(node.pk, actor=ACTOR, reason="XID 79 on GPU 3")  # queued on commit

    def chain_done() -> bool:
        return worker.alive() and Run.objects.filter(node=node, status=RunStatus.PASSED).count() == 3

    wait_until(
        chain_done,
        timeout=TIMEOUT,
        what="the three follow-ups of a drain request",
        explain=lambda: (
            f"{list(Run.objects.filter(node=node).values('kind', 'status', 'summary'))}\n" + worker.explain()
        ),
    )
    node.refresh_from_db()
    return node, list(NodeEvent.objects.filter(node=node).order_by("pk"))


def test_a_real_worker_carries_a_drain_request_through_to_triage(celery_worker):
    node, events = drain_through_the_worker(celery_worker)

    assert node.state == S.TRIAGE
    assert [(e.transition, e.source_state, e.target_state, e.actor_name) for e in events] == [
        ("request_drain", S.PRODUCTION, S.DRAIN_PENDING, "system:infra-test"),
        ("start_draining", S.DRAIN_PENDING, S.DRAINING, "system:scheduler"),
        ("complete_drain", S.DRAINING, S.TRIAGE, "system:scheduler"),
    ]
    # Each follow-up names the transition that asked for it.
    assert events[1].details == {"trigger_event": events[0].pk, "scheduler": "none"}
    assert events[2].details == {"trigger_event": events[1].pk, "scheduler": "none", "detail": "no workload scheduler"}

    runs = {run.trigger_id: run for run in Run.objects.filter(node=node)}
    assert set(runs) == {e.pk for e in events}
    for run in runs.values():
        assert (run.kind, run.status, run.error) == (RunKind.TRANSITION_FOLLOWUP, RunStatus.PASSED, "")
        assert run.started <= run.finished
        # Queued once on commit, and delivered once: the task id is the run's own.
        assert celery_worker.log().count(f"[{run.task_id}] received") == 1
    assert runs[events[0].pk].summary == "No customer job running: started draining."
    assert runs[events[1].pk].summary == "Drain complete."


def test_a_follow_up_delivered_again_changes_nothing(celery_worker):
    node, events = drain_through_the_worker(celery_worker)
    runs_before = list(Run.objects.filter(node=node).order_by("pk").values())
    node_before = Node.objects.values().get(pk=node.pk)

    # As if the broker redelivered every message of the chain (acks_late makes that possible).
    task_ids = [run_transition_followup.delay(event.pk).id for event in events]
    for task_id in task_ids:
        assert celery_worker.wait_for_task(task_id).endswith(": 'passed'")

    assert list(Run.objects.filter(node=node).order_by("pk").values()) == runs_before
    assert NodeEvent.objects.filter(node=node).count() == len(events)
    assert Node.objects.values().get(pk=node.pk) == node_before


def test_a_real_worker_snapshots_state_counts(celery_worker):
    tenant = TenantFactory()
    big, small = ClusterFactory(), ClusterFactory()
    NodeFactory.create_batch(2, production=True, cluster=big, tenant=tenant)
    NodeFactory(triage=True, cluster=big, tenant=tenant)
    NodeFactory(production=True, cluster=small)

    result = snapshot_state_counts.delay()
    assert celery_worker.wait_for_task(result.id).endswith(": 3")

    counts = {(s.state, s.cluster_id, s.tenant_id): s.count for s in StateCountSnapshot.objects.all()}
    assert counts == {
        (S.PRODUCTION, big.pk, tenant.pk): 2,
        (S.TRIAGE, big.pk, tenant.pk): 1,
        (S.PRODUCTION, small.pk, None): 1,
    }
