"""Real Celery workers that a test starts, kills and starts again.

The worker of tests/infra (``celery -A nodewarden worker`` on all four queues, its settings from
the environment: this xdist worker's test database and private Redis database), plus what a
crash test needs: extra environment per worker (the subprocess reads no pytest ``settings``), and
a process group of its own, so that ``kill()`` can SIGKILL it as the OOM killer or a lost host would.

A test module that uses ``start_worker`` imports it with the fixtures it needs (``real_postgres``,
``real_redis_url``, ``broker_url``): pytest looks fixtures up in the test's own module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from nodewarden.celery import QUEUE_NAMES
from tests.infra.conftest import real_postgres, real_redis_url, wait_until  # noqa: F401  (fixtures)
from tests.infra.test_celery_worker import TIMEOUT, Worker, broker_url, database_url  # noqa: F401  (fixture)


class KillableWorker(Worker):
    """A ``celery worker`` subprocess leading its own process group."""

    def kill(self) -> None:
        """SIGKILL the whole group: no warm shutdown, no ack, no clean-up of any kind."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.terminate()  # warm shutdown
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture
def start_worker(
    real_postgres: dict[str, Any],  # noqa: F811  (the imported fixture, by name)
    broker_url: str,  # noqa: F811
    tmp_path: Path,
    worker_id: str,
) -> Iterator[Callable[..., KillableWorker]]:
    """``start_worker(name, **env)``: a worker on all queues, ready; every one is stopped after the test."""
    started: list[KillableWorker] = []

    def start(name: str, **env: str) -> KillableWorker:
        environ = {
            **os.environ,
            "DATABASE_URL": database_url(real_postgres),
            # Close the connection after each task: pytest-django truncates, then drops, this database.
            "DB_CONN_MAX_AGE": "0",
            "REDIS_URL": broker_url,
            "CELERY_BROKER_URL": broker_url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "NODEWARDEN_VAR_DIR": str(tmp_path / "var"),
            **env,
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
            f"{name}-{worker_id}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        log_path = tmp_path / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                command,
                cwd=settings.BASE_DIR,
                env=environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = KillableWorker(proc, log_path)
        started.append(worker)
        wait_until(
            lambda: worker.alive() and " ready." in worker.log(),
            timeout=TIMEOUT,
            what=f"Celery worker {name} to start",
            explain=worker.explain,
        )
        return worker

    yield start
    for worker in started:
        worker.stop()
