"""checks.services: requesting, idleness, claiming, results and cancelling, without HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from checks import services
from checks.services import CheckConflict, CheckForbidden, CheckResult
from checks.specs import describe_figures
from health.models import Alert, Finding
from nodes.choices import EventKind, NodeState, RunKind, RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from nodewarden.errors import ReasonRequired
from tests.factories import NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db
S = NodeState


def request(node, kind="gpu_stress", user=None, **params):
    actor = Actor(user=user) if user else Actor.system("tests")
    return services.request_check(node.pk, kind, params=params, actor=actor, reason="suspected slow GPU")


def result(status="passed", **overrides) -> CheckResult:
    now = timezone.now()
    values = {
        "status": status,
        "summary": "all GPUs above threshold",
        "figures": {"gpu0_tflops": 612.5, "gpu1_tflops": 640.0, "min_tflops": 612.5, "errors": 0},
        "output": "GPU 0: OK\n",
        "started_at": now - timedelta(seconds=70),
        "finished_at": now,
    }
    return CheckResult(**{**values, **overrides})


def claimed(node, kind="gpu_stress") -> Run:
    run = request(node, kind)
    (taken,) = services.claim_checks_for_agent(node.pk).runs
    assert taken.pk == run.pk
    return taken


# --- Requesting ---------------------------------------------------------------
def test_it_queues_a_check_with_normalised_params_and_records_who_asked_and_why(node, operator):
    run = request(node, user=operator, seconds=120)

    assert (run.status, run.kind, run.trigger) == (RunStatus.QUEUED, RunKind.GPU_STRESS, None)
    assert run.params == {"seconds": 120, "matrix_size": 8192, "dtype": "bf16", "min_tflops": 0.0}
    assert (run.requested_by, run.requested_reason) == (operator, "suspected slow GPU")
    event = NodeEvent.objects.get(node=node)
    assert (event.kind, event.actor_name, event.reason) == (EventKind.ACTION, "operator", "suspected slow GPU")
    assert event.details == {"check_requested": "gpu_stress", "check_run": run.pk, "params": run.params}


def test_it_refuses_a_second_open_run_of_the_same_kind_but_not_another_kind(node):
    request(node, "dcgm_diag")
    with pytest.raises(CheckConflict, match="DCGM diagnostics is already queued or running"):
        request(node, "dcgm_diag")
    request(node, "nccl_test")
    assert Run.objects.filter(node=node).count() == 2
    assert NodeEvent.objects.filter(node=node).count() == 2  # the refused request left no history row


def test_it_allows_the_same_kind_again_once_the_first_run_finished(idle_node):
    run = claimed(idle_node)
    services.record_check_result(run.pk, idle_node.pk, result=result())
    assert request(idle_node).status == RunStatus.QUEUED


@pytest.mark.parametrize("state", [S.DECOMMISSIONED, S.RMA, S.ENROLLED])
def test_it_refuses_checks_on_nodes_where_they_make_no_sense(state):
    node = NodeFactory(state=state)
    with pytest.raises(CheckConflict, match="Cannot run checks on a node in state"):
        request(node)
    assert not Run.objects.exists()


def test_it_needs_a_reason_the_operate_permission_and_valid_params(node, viewer):
    with pytest.raises(ReasonRequired):
        services.request_check(node.pk, "dcgm_diag", actor=Actor.system("tests"), reason="  ")
    with pytest.raises(CheckForbidden):
        request(node, user=viewer)
    with pytest.raises(ValidationError):
        request(node, "dcgm_diag", level=9)
    assert not Run.objects.exists() and not NodeEvent.objects.exists()


# --- Idleness -------------------------------------------------------------------
def test_a_node_with_a_fresh_report_of_no_gpu_processes_is_idle(node):
    report_health(node, processes=0, age=timedelta(seconds=30))
    assert services.node_is_idle(node) == (True, "No GPU compute processes in a fresh report.")


@pytest.mark.parametrize(
    ("processes", "age", "why"),
    [
        (3, timedelta(seconds=5), "3 GPU compute process(es) running."),
        (0, timedelta(minutes=5), "Latest report is 300 s old"),
        (None, timedelta(seconds=5), "does not say how many GPU processes"),
    ],
)
def test_a_node_that_is_busy_or_not_known_to_be_idle_is_not_idle(node, processes, age, why):
    report_health(node, processes=processes, age=age)
    idle, reason = services.node_is_idle(node)
    assert not idle and why in reason


def test_a_node_that_never_reported_is_not_idle(node):
    assert services.node_is_idle(node) == (False, "No report from the node agent yet.")


@pytest.mark.parametrize("state", [S.DRAIN_PENDING, S.DRAINING])
def test_a_draining_node_is_not_idle_whatever_its_counters_say(state):
    node = NodeFactory(state=state)
    report_health(node, processes=0)
    idle, reason = services.node_is_idle(node)
    assert not idle and "a job may still be running" in reason


# --- Claiming ---------------------------------------------------------------------
def test_claiming_hands_each_queued_run_out_once(idle_node):
    first, second = request(idle_node, "gpu_stress", seconds=30), request(idle_node, "dcgm_diag")

    claim = services.claim_checks_for_agent(idle_node.pk)
    assert claim.idle and [r.pk for r in claim.runs] == [first.pk, second.pk]
    again = services.claim_checks_for_agent(idle_node.pk)
    assert again.idle and again.runs == []

    first.refresh_from_db()
    assert first.status == RunStatus.RUNNING and first.claimed_at is not None
    assert first.deadline == first.claimed_at + timedelta(seconds=30 + 300)


def test_claiming_hands_out_nothing_while_the_node_is_busy(node):
    run = request(node)
    report_health(node, processes=2)

    claim = services.claim_checks_for_agent(node.pk)
    assert (claim.idle, claim.runs) == (False, [])
    assert claim.reason == "2 GPU compute process(es) running."
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_stale_copy_of_a_queued_run_cannot_be_claimed_twice(idle_node):
    """The compare-and-swap itself: a claim racing with another one changes no row twice."""
    run = request(idle_node)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)  # another poll won meanwhile
    assert services.claim_checks_for_agent(idle_node.pk).runs == []


# --- Results ----------------------------------------------------------------------
def test_a_passed_result_is_recorded_with_its_figures_and_timings(idle_node):
    run = claimed(idle_node)
    outcome = result()

    recorded, changed = services.record_check_result(run.pk, idle_node.pk, result=outcome)

    assert changed and recorded.status == RunStatus.PASSED
    run.refresh_from_db()
    assert (run.figures, run.output, run.summary) == (outcome.figures, outcome.output, outcome.summary)
    assert (run.started, run.finished) == (outcome.started_at, outcome.finished_at)
    assert describe_figures(run.kind, run.figures) == "min 612.5 TFLOP/s over 2 GPUs"
    event = NodeEvent.objects.filter(node=idle_node).first()
    assert event.actor_name == f"system:agent:{idle_node.hostname}"
    assert event.reason == "GPU stress test passed: all GPUs above threshold"
    assert not Finding.objects.exists()


def test_a_repeated_identical_result_is_a_no_op(idle_node):
    run = claimed(idle_node)
    outcome = result()
    services.record_check_result(run.pk, idle_node.pk, result=outcome)
    events = NodeEvent.objects.count()

    again, changed = services.record_check_result(run.pk, idle_node.pk, result=outcome)
    assert not changed and again.status == RunStatus.PASSED
    assert NodeEvent.objects.count() == events


def test_a_different_second_result_is_a_conflict(idle_node):
    run = claimed(idle_node)
    services.record_check_result(run.pk, idle_node.pk, result=result())
    with pytest.raises(CheckConflict, match="a different result was not recorded"):
        services.record_check_result(run.pk, idle_node.pk, result=result("failed"))
    run.refresh_from_db()
    assert run.status == RunStatus.PASSED


def test_another_nodes_agent_cannot_report_for_the_run(idle_node):
    run = claimed(idle_node)
    other = NodeFactory(production=True)
    with pytest.raises(Run.DoesNotExist):
        services.record_check_result(run.pk, other.pk, result=result())


def test_a_result_for_a_run_never_claimed_is_a_conflict(node):
    run = request(node)
    with pytest.raises(CheckConflict):
        services.record_check_result(run.pk, node.pk, result=result())


def test_a_failed_check_raises_a_degraded_finding_and_alert(idle_node):
    run = claimed(idle_node, "nccl_test")
    services.record_check_result(
        run.pk, idle_node.pk, result=result("failed", summary="busbw below 300 GB/s", figures={"busbw_gbps": 212.5})
    )

    finding = Finding.objects.get(node=idle_node)
    assert (finding.rule, finding.severity, finding.subject, finding.source) == (
        "active_check",
        "degraded",
        "nccl_test",
        "check",
    )
    assert finding.summary == "NCCL all-reduce test failed: busbw below 300 GB/s"
    assert finding.evidence == {"check_run": run.pk, "figures": {"busbw_gbps": 212.5}}
    assert Alert.objects.get(node=idle_node).rule == "active_check"
    assert NodeEvent.objects.filter(node=idle_node, kind=EventKind.FINDING).count() == 1


def test_every_failed_run_is_a_finding_of_its_own(idle_node):
    for _ in range(2):
        run = claimed(idle_node)
        services.record_check_result(run.pk, idle_node.pk, result=result("failed"))
    assert Finding.objects.filter(node=idle_node).count() == 2
    assert Alert.objects.filter(node=idle_node).count() == 1


@pytest.mark.parametrize("status", [RunStatus.NOT_AVAILABLE, RunStatus.ERROR])
def test_a_missing_tool_or_a_broken_run_is_recorded_without_a_finding(idle_node, status):
    run = claimed(idle_node, "dcgm_diag")
    services.record_check_result(run.pk, idle_node.pk, result=result(status, summary="dcgmi not found", figures={}))
    run.refresh_from_db()
    assert run.status == status
    assert not Finding.objects.exists() and not Alert.objects.exists()


def test_it_refuses_statuses_an_agent_may_not_report(idle_node):
    run = claimed(idle_node)
    with pytest.raises(ValidationError):
        services.record_check_result(run.pk, idle_node.pk, result=result(RunStatus.QUEUED))


def test_only_the_tail_of_an_oversized_output_is_kept(idle_node):
    run = claimed(idle_node)
    services.record_check_result(run.pk, idle_node.pk, result=result(output="x" * 70_000 + "VERDICT: PASS"))
    run.refresh_from_db()
    assert len(run.output.encode()) == 64 * 1024 and run.output.endswith("VERDICT: PASS")


# --- Cancelling ---------------------------------------------------------------------
def test_a_queued_check_can_be_cancelled_with_a_reason(node, operator):
    run = request(node)
    cancelled = services.cancel_check(run.pk, actor=Actor(user=operator), reason="wrong node")
    assert cancelled.status == RunStatus.CANCELLED and cancelled.finished is not None
    assert NodeEvent.objects.filter(node=node, details__check_cancelled="gpu_stress").exists()
    assert request(node).status == RunStatus.QUEUED  # no longer open: the kind may be asked for again


def test_a_claimed_check_cannot_be_cancelled(idle_node, operator):
    run = claimed(idle_node)
    with pytest.raises(CheckConflict, match="Only a queued check can be cancelled"):
        services.cancel_check(run.pk, actor=Actor(user=operator), reason="changed my mind")
