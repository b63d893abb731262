"""checks.tasks.expire_stale_checks: a claimed run with no result by its deadline becomes an error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from checks import services, tasks
from checks.services import CheckConflict, CheckResult
from nodes.choices import RunStatus
from nodes.models import NodeEvent
from nodes.services import Actor

from .conftest import report_health

pytestmark = pytest.mark.django_db
CLAIMED_AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def claimed_run(node):
    """A 60 s GPU stress test taken by the agent at CLAIMED_AT: due by 10:06 (60 s plus 5 min slack)."""
    run = services.request_check(
        node.pk, "gpu_stress", params={"seconds": 60}, actor=Actor.system("tests"), reason="routine"
    )
    with time_machine.travel(CLAIMED_AT, tick=False):
        report_health(node, processes=0)
        (run,) = services.claim_checks_for_agent(node.pk).runs
    assert run.deadline == CLAIMED_AT + timedelta(minutes=6)
    return run


def late_result(status="failed") -> CheckResult:
    return CheckResult(
        status=status,
        summary="GPU 2 slow",
        figures={"gpu0_tflops": 401, "min_tflops": 401, "errors": 0},
        output="",
        started_at=CLAIMED_AT,
        finished_at=CLAIMED_AT + timedelta(minutes=9),
    )


def test_a_run_within_its_deadline_is_left_alone(claimed_run):
    with time_machine.travel(CLAIMED_AT + timedelta(minutes=5), tick=False):
        assert tasks.expire_stale_checks() == 0
    claimed_run.refresh_from_db()
    assert claimed_run.status == RunStatus.RUNNING


def test_a_run_past_its_deadline_becomes_an_error_once(claimed_run):
    with time_machine.travel(CLAIMED_AT + timedelta(minutes=7), tick=False):
        assert tasks.expire_stale_checks() == 1
        assert tasks.expire_stale_checks() == 0  # idempotent: the second sweep finds nothing

    claimed_run.refresh_from_db()
    assert claimed_run.status == RunStatus.ERROR
    assert "No result from the node agent by the deadline" in claimed_run.error
    event = NodeEvent.objects.get(details__check_run=claimed_run.pk, details__check_status="error")
    assert event.actor_name == "system:checks"


def test_a_result_arriving_after_expiry_is_still_recorded_once(claimed_run, node):
    with time_machine.travel(CLAIMED_AT + timedelta(minutes=7), tick=False):
        tasks.expire_stale_checks()

    run, changed = services.record_check_result(claimed_run.pk, node.pk, result=late_result())
    assert changed and run.status == RunStatus.FAILED and run.error == "Result arrived after the deadline."
    # From then on the run holds a real result: a repeat is a no-op, a different one a conflict.
    assert services.record_check_result(claimed_run.pk, node.pk, result=late_result())[1] is False
    with pytest.raises(CheckConflict):
        services.record_check_result(claimed_run.pk, node.pk, result=late_result("passed"))


def test_queued_runs_never_expire(node):
    run = services.request_check(node.pk, "dcgm_diag", actor=Actor.system("tests"), reason="when idle")
    with time_machine.travel(datetime.now(UTC) + timedelta(days=30), tick=False):
        assert tasks.expire_stale_checks() == 0
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
