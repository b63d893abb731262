"""Fixtures for the Day 1 pipeline: Celery runs follow-ups inline, and a node agent
stand-in that reports and answers checks through the real services."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest
from django.utils import timezone

from checks.services import CheckResult, claim_checks_for_agent, record_check_result
from nodes.choices import NodeState, RunKind, RunStatus
from nodewarden.celery import app as celery_app
from telemetry.ingest import ingest_reports
from telemetry.schema import AgentReport
from telemetry.testing import make_report
from tests.factories import NodeFactory
from tests.oncommit import committed


@pytest.fixture
def eager(django_capture_on_commit_callbacks) -> Iterator[Callable[[], Any]]:
    """Follow-up tasks run inline when the test's transaction 'commits': use as
    ``with eager(): ...``. Callbacks queued by those tasks run too, in order."""
    celery_app.conf.task_always_eager = True
    try:
        yield committed(django_capture_on_commit_callbacks)
    finally:
        celery_app.conf.task_always_eager = False


def idle_report(node: Any, at: datetime | None = None, **kwargs: Any) -> dict[str, Any]:
    """What an idle HGX H100 node's agent reports (no compute processes), as a dict to edit."""
    report = make_report(node.hostname, collected_at=at or timezone.now(), seed=kwargs.pop("seed", 1), **kwargs)
    for gpu in report["gpus"]:
        gpu["compute_processes"] = 0
    return report


def send(node: Any, report: dict[str, Any]) -> None:
    """The report goes through the real ingest (rules evaluated), as the agent's POST would."""
    ingest_reports(node.pk, [msgspec.convert(report, AgentReport)])


def answer_checks(node: Any, outcomes: dict[str, tuple[str, dict[str, float]]] | None = None) -> list[int]:
    """The agent's side of burn-in: claim the queued checks and post a result for each
    (``outcomes``: kind -> (status, figures); by default every check passes with healthy figures)."""
    healthy = {
        RunKind.GPU_STRESS: (RunStatus.PASSED, {"min_tflops": 712.0, "errors": 0.0}),
        RunKind.DCGM_DIAG: (RunStatus.PASSED, {"tests_passed": 9.0, "tests_failed": 0.0, "level": 2.0}),
        RunKind.NCCL_TEST: (RunStatus.PASSED, {"busbw_gbps": 362.0}),
        RunKind.MEMORY_TEST: (RunStatus.PASSED, {"bytes_tested": 7.0e11, "mismatches": 0.0}),
    }
    healthy.update(outcomes or {})
    claim = claim_checks_for_agent(node.pk)
    assert claim.idle, claim.reason
    now = timezone.now()
    for run in claim.runs:
        status, figures = healthy[run.kind]
        record_check_result(
            run.pk,
            node.pk,
            result=CheckResult(
                status=status,
                summary=f"{run.kind} {status}",
                figures=figures,
                output="",
                started_at=now - timedelta(seconds=1),
                finished_at=now,
            ),
        )
    return [run.pk for run in claim.runs]


@pytest.fixture
def node_in(db) -> Callable[..., Any]:
    """A node put straight into a state (set up directly, as the factories do)."""

    def make(state: str = NodeState.ONBOARD, **kwargs: Any) -> Any:
        return NodeFactory(state=state, **kwargs)

    return make
