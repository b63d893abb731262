"""The Day 1 pipeline from the inventory check to production, and every way out to triage.

The firmware stage needs a BMC: its tests run against the Redfish emulator (test_firmware).
Here nodes enter the pipeline at the inventory check, with a real agent-shaped report
going through the real ingest and checks answered through the real check services.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from health.models import Finding
from health.services import raise_finding
from nodes import services as node_services
from nodes.choices import ACTIVE_KINDS, NodeState, RunKind, RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from validation import services
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan

from .conftest import answer_checks, idle_report, send

pytestmark = pytest.mark.django_db
TESTS = Actor.system("tests")
S = NodeState


def stage_runs(node, kind=None):
    runs = Run.objects.filter(node=node, kind__startswith="stage_").order_by("created", "id")
    return runs.filter(kind=kind) if kind else runs


def last_event(node):
    return NodeEvent.objects.filter(node=node).order_by("-created", "-id").first()


@pytest.fixture
def spec(db):
    from tests.factories import HardwareProfileFactory

    return Day1Spec.objects.create(
        hardware_profile=HardwareProfileFactory(),
        soak_seconds=0,
        min_busbw_gbps=300,
        min_tflops_per_gpu=600,
        burn_in_seconds=30,
    )


@pytest.fixture
def at_inventory(node_in, spec, eager):
    """A node whose firmware stage just passed: the inventory check is open, waiting for a report."""
    node = node_in(S.FIRMWARE_UPDATE, hardware_profile=spec.hardware_profile)
    with eager():
        node_services.pass_firmware(node.pk, actor=TESTS, reason="firmware verified")
    node.refresh_from_db()
    return node


def advance(eager):
    with eager():
        return services.advance_open_stages()


def test_a_node_with_what_its_profile_says_walks_from_inventory_to_production(at_inventory, eager):
    node = at_inventory
    (inventory,) = stage_runs(node)
    assert inventory.status == RunStatus.RUNNING and node.state == S.INVENTORY_CHECK  # waiting for a report

    send(node, idle_report(node))
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.BURN_IN
    inventory.refresh_from_db()
    assert inventory.status == RunStatus.PASSED and "8 x NVIDIA H100 80GB HBM3" in inventory.summary

    burn_in = stage_runs(node, RunKind.STAGE_BURN_IN).get()
    requested = Run.objects.filter(
        node=node, kind__in=[RunKind.GPU_STRESS, RunKind.DCGM_DIAG, RunKind.NCCL_TEST, RunKind.MEMORY_TEST]
    )
    assert requested.count() == 4 and set(requested.values_list("status", flat=True)) == {RunStatus.QUEUED}
    stress = requested.get(kind=RunKind.GPU_STRESS)
    assert stress.params["seconds"] == 30 and stress.params["min_tflops"] == 600

    advance(eager)  # checks still queued: nothing decided
    burn_in.refresh_from_db()
    assert burn_in.status == RunStatus.RUNNING

    answer_checks(node)
    send(node, idle_report(node, seed=2))  # the fabric check wants a report made after it began
    advance(eager)  # burn-in passes -> fabric check opens and, with a fresh report, passes
    advance(eager)  # ... -> reliability (soak 0) passes -> production
    node.refresh_from_db()
    assert node.state == S.PRODUCTION, [(r.kind, r.status, r.summary) for r in stage_runs(node)]
    assert [r.status for r in stage_runs(node)] == [RunStatus.PASSED] * 4
    assert stage_runs(node, RunKind.STAGE_BURN_IN).get().figures["nccl_test.busbw_gbps"] == 362.0
    assert last_event(node).transition == "release_to_production"


def test_a_missing_gpu_sends_the_node_to_triage_with_the_exact_difference(at_inventory, eager):
    node = at_inventory
    send(node, idle_report(node, gpus=7))
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE
    event = last_event(node)
    assert event.transition == "fail_validation"
    assert "Inventory check failed" in event.reason and "GPU count 7, profile HGX H100 8-GPU expects 8" in event.reason
    assert event.details["stage"] == Stage.INVENTORY
    finding = Finding.objects.get(node=node, rule=services.FINDING_RULE)
    assert finding.severity == "degraded" and "GPU count 7" in finding.summary


def test_a_narrow_pcie_link_and_a_slow_hca_are_both_named(at_inventory, eager):
    node = at_inventory
    report = idle_report(node)
    report["gpus"][3]["pcie_link_width"] = 8
    report["ib_ports"][5]["rate_gbps"] = 200.0
    send(node, report)
    advance(eager)
    node.refresh_from_db()
    reason = last_event(node).reason
    assert node.state == S.TRIAGE
    assert "GPU 3 PCIe link x8 of x16" in reason and "mlx5_5/1 200 Gb/s" in reason


def test_burn_in_below_the_bus_bandwidth_floor_fails(at_inventory, eager):
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    answer_checks(node, {RunKind.NCCL_TEST: (RunStatus.PASSED, {"busbw_gbps": 180.5})})
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE
    assert "NCCL bus bandwidth 180.5 GB/s below 300 GB/s" in last_event(node).reason


def test_a_check_queued_before_the_stage_began_is_asked_again_not_counted(at_inventory, eager, operator):
    from checks.services import request_check

    node = at_inventory
    earlier = request_check(
        node.pk,
        RunKind.GPU_STRESS,
        params={"seconds": 30},
        actor=Actor(user=operator),
        reason="asked before the reboot",
    )
    Run.objects.filter(pk=earlier.pk).update(created=timezone.now() - timedelta(hours=1))
    send(node, idle_report(node))
    advance(eager)  # inventory passes, burn-in begins
    earlier.refresh_from_db()
    burn_in = stage_runs(node, "stage_burn_in").get()
    assert earlier.status == RunStatus.CANCELLED and "asked before this stage began" in earlier.summary
    assert burn_in.details["checks"][RunKind.GPU_STRESS] != earlier.pk  # judged on a result of now


def test_a_failed_check_fails_burn_in(at_inventory, eager):
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    answer_checks(node, {RunKind.DCGM_DIAG: (RunStatus.FAILED, {"tests_passed": 7.0, "tests_failed": 2.0})})
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE and "DCGM diagnostics failed" in last_event(node).reason


def test_a_failed_burn_in_says_so_once_in_the_finding_and_the_reason(at_inventory, eager):
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    answer_checks(node, {RunKind.DCGM_DIAG: (RunStatus.FAILED, {"tests_passed": 7.0, "tests_failed": 2.0})})
    advance(eager)
    reason = last_event(node).reason
    finding = Finding.objects.get(node=node, subject="burn_in")
    assert reason.startswith("Burn-in failed: DCGM diagnostics failed"), reason
    assert finding.summary.startswith("Burn-in failed: DCGM diagnostics failed"), finding.summary


def test_a_missing_tool_is_noted_not_failed_unless_the_spec_requires_it(at_inventory, eager, spec):
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    answer_checks(node, {RunKind.DCGM_DIAG: (RunStatus.NOT_AVAILABLE, {})})
    advance(eager)
    burn_in = stage_runs(node, RunKind.STAGE_BURN_IN).get()
    assert burn_in.status == RunStatus.PASSED and "DCGM diagnostics not available" in burn_in.summary


def test_a_missing_tool_fails_burn_in_where_the_spec_requires_every_tool(at_inventory, eager, spec):
    spec.require_all_tools = True
    spec.save()
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    answer_checks(node, {RunKind.NCCL_TEST: (RunStatus.NOT_AVAILABLE, {})})
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE and "NCCL all-reduce test not available" in last_event(node).reason


def test_a_catastrophic_finding_during_burn_in_fails_it_before_the_checks_end(at_inventory, eager):
    node = at_inventory
    send(node, idle_report(node))
    advance(eager)
    report = idle_report(node, seed=3, xid=79, xid_gpu=2)
    send(node, report)  # the real rules turn XID 79 into a catastrophic finding
    assert Finding.objects.filter(node=node, severity="catastrophic").exists()
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE and "Catastrophic finding during burn-in" in last_event(node).reason
    # The checks no agent took are withdrawn: nothing stresses the node later for a stage long over.
    checks = Run.objects.filter(node=node, kind__in=ACTIVE_KINDS)
    assert checks.count() == 4 and set(checks.values_list("status", flat=True)) == {RunStatus.CANCELLED}


def test_a_degraded_finding_during_the_soak_fails_reliability(node_in, spec, eager):
    spec.soak_seconds = 3600
    spec.save()
    node = node_in(S.FABRIC_CHECK, hardware_profile=spec.hardware_profile)
    with eager():
        node_services.pass_fabric_check(node.pk, actor=TESTS, reason="cabling verified")
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.RELIABILITY_ASSESSMENT  # soaking
    raise_finding(node.pk, rule="ecc_uncorrectable", severity="degraded", summary="Uncorrectable ECC on GPU 1")
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.TRIAGE and "Uncorrectable ECC on GPU 1" in last_event(node).reason


def test_the_soak_passes_only_when_its_time_is_up(node_in, spec, eager):
    spec.soak_seconds = 3600
    spec.save()
    node = node_in(S.FABRIC_CHECK, hardware_profile=spec.hardware_profile)
    with eager():
        node_services.pass_fabric_check(node.pk, actor=TESTS, reason="cabling verified")
    run = stage_runs(node, RunKind.STAGE_RELIABILITY).get()
    raise_finding(node.pk, rule="gpu_temperature", severity="warning", summary="GPU 2 warm")  # a warning is fine
    with eager():
        services.advance_open_stages(now=run.started + timedelta(minutes=59))
    node.refresh_from_db()
    assert node.state == S.RELIABILITY_ASSESSMENT
    with eager():
        services.advance_open_stages(now=run.started + timedelta(hours=1, seconds=1))
    node.refresh_from_db()
    assert node.state == S.PRODUCTION
    run.refresh_from_db()
    assert "1 lesser finding" in run.summary


def test_a_stage_with_no_verdict_by_its_deadline_sends_the_node_to_triage(at_inventory, eager):
    node = at_inventory  # no report ever comes
    run = stage_runs(node).get()
    with eager():
        services.advance_open_stages(now=run.deadline + timedelta(seconds=1))
    node.refresh_from_db()
    assert node.state == S.TRIAGE and "Inventory check timed out" in last_event(node).reason


def test_beginning_the_same_stage_twice_opens_one_run(at_inventory):
    event = NodeEvent.objects.filter(node=at_inventory, transition="pass_firmware").get()
    assert services.begin_stage(event.pk) == services.begin_stage(event.pk)
    assert stage_runs(at_inventory).count() == 1


def test_an_operator_skips_a_stage_with_a_reason_on_the_record(at_inventory, operator, eager):
    with eager():
        run = services.skip_stage(at_inventory.pk, actor=Actor(user=operator), reason="HGX tray swapped, same SKU")
    at_inventory.refresh_from_db()
    assert run.status == RunStatus.SKIPPED and at_inventory.state == S.BURN_IN
    event = NodeEvent.objects.filter(node=at_inventory, transition="pass_inventory_check").get()
    assert event.actor == operator and "Skipped by operator: HGX tray swapped" in event.reason


def test_skip_and_start_need_a_reason_the_permission_and_a_day1_state(node_in, viewer, operator):
    node = node_in(S.PRODUCTION)
    with pytest.raises(services.StageConflict, match="not in a Day 1 stage"):
        services.skip_stage(node.pk, actor=Actor(user=operator), reason="x")
    with pytest.raises(services.StageForbidden):
        services.skip_stage(node.pk, actor=Actor(user=viewer), reason="x")
    with pytest.raises(node_services.ReasonRequired):
        services.start_stage(node.pk, actor=Actor(user=operator), reason=" ")


def test_an_operator_restarts_a_stage_left_without_an_open_run(node_in, spec, operator, eager):
    node = node_in(S.INVENTORY_CHECK, hardware_profile=spec.hardware_profile)  # e.g. forced here by an admin
    with eager():
        run = services.start_stage(node.pk, actor=Actor(user=operator), reason="forced here after a tray swap")
    assert run.status == RunStatus.RUNNING  # waits for a report made after the stage began
    send(node, idle_report(node))
    advance(eager)
    run.refresh_from_db()
    assert run.status == RunStatus.PASSED and run.trigger.actor == operator
    with pytest.raises(services.StageConflict, match="already running"):
        services.start_stage(node.pk, actor=Actor(user=operator), reason="again")  # burn-in is open now


def test_a_stage_whose_follow_up_was_lost_begins_after_the_grace(node_in, spec, django_capture_on_commit_callbacks):
    """The follow-up that begins a stage was lost (a worker killed before it ran): nothing would
    ever conclude or time out the stage, so the node sat in it for good. After the grace the
    stage advancer begins it from the transition that put the node there, once."""
    node = node_in(S.FIRMWARE_UPDATE, hardware_profile=spec.hardware_profile)
    with django_capture_on_commit_callbacks(execute=False):  # the follow-up is never delivered
        node_services.pass_firmware(node.pk, actor=TESTS, reason="firmware verified")
    entered = timezone.now()
    assert not stage_runs(node, RunKind.STAGE_INVENTORY).exists()
    assert services.begin_orphaned_stages(now=entered + timedelta(minutes=1)) == 0  # within the grace
    later = entered + services.ORPHAN_GRACE + timedelta(seconds=1)
    assert services.begin_orphaned_stages(now=later) == 1
    run = stage_runs(node, RunKind.STAGE_INVENTORY).get()
    assert run.status == RunStatus.RUNNING and run.trigger == last_event(node)
    assert services.begin_orphaned_stages(now=later) == 0  # open now: nothing to begin twice


def test_revalidation_walks_only_the_stages_of_its_plan(node_in, spec, eager):
    RevalidationPlan.objects.create(reentry=Reentry.REMEDIATING, stages=[Stage.INVENTORY, Stage.RELIABILITY])
    node = node_in(S.REMEDIATING, hardware_profile=spec.hardware_profile)
    with eager():
        node_services.revalidate(node.pk, actor=TESTS, reason="GPU reset worked")
    firmware = stage_runs(node, RunKind.STAGE_FIRMWARE).get()
    assert firmware.status == RunStatus.SKIPPED and "Not in the re-validation plan" in firmware.summary
    send(node, idle_report(node))
    advance(eager)  # inventory passes; burn-in and fabric are skipped; reliability (soak 0) passes
    node.refresh_from_db()
    assert node.state == S.PRODUCTION
    assert [r.status for r in stage_runs(node)] == [
        RunStatus.SKIPPED,
        RunStatus.PASSED,
        RunStatus.SKIPPED,
        RunStatus.SKIPPED,
        RunStatus.PASSED,
    ]


def test_a_node_that_joins_starts_validation_on_its_own(node_in, eager):
    node = node_in(S.INITIALIZING)
    with eager():
        node_services.mark_onboard(node.pk, actor=TESTS, reason="agent joined")
    node.refresh_from_db()
    # Onboard -> firmware update at once; with no BMC configured the firmware stage fails clearly.
    assert NodeEvent.objects.filter(node=node, transition="start_validation").exists()
    assert node.state == S.TRIAGE and "No BMC is configured" in last_event(node).reason


def test_a_node_moved_on_by_an_operator_is_left_alone(at_inventory, eager, fleet_admin):
    node_services.force_state(at_inventory.pk, S.TRIAGE, actor=Actor(user=fleet_admin), reason="pulled for repair")
    send(at_inventory, idle_report(at_inventory))
    advance(eager)
    run = stage_runs(at_inventory).get()
    at_inventory.refresh_from_db()
    assert run.status == RunStatus.SUPERSEDED and at_inventory.state == S.TRIAGE


def test_timeouts_scale_with_the_stage_duration(spec):
    assert spec.timeout(Stage.BURN_IN) == timedelta(seconds=60 + 3600)
    assert spec.timeout(Stage.INVENTORY) == timedelta(seconds=3600)
    assert timezone.now()  # keeps the import honest


def test_a_stage_started_twice_at_once_opens_one_run_and_keeps_its_checks(
    node_in, spec, operator, eager, django_capture_on_commit_callbacks
):
    """The demo saw it: a node entered burn-in and, before the transition's follow-up ran, another
    starter (the demo's bring-up through ``start_stage``; the orphan sweep) opened the stage. The
    late follow-up then opened a second run, whose start withdrew the first's queued checks as
    "asked before this stage began", and the first run failed burn-in on checks we cancelled
    ourselves. One open stage run per node: the second start finds the first."""
    node = node_in(S.INVENTORY_CHECK, hardware_profile=spec.hardware_profile)
    with django_capture_on_commit_callbacks(execute=False) as late:  # the follow-up is not delivered yet
        node_services.pass_inventory_check(node.pk, actor=TESTS, reason="inventory as profiled")
    first = services.start_stage(node.pk, actor=Actor(user=operator), reason="the demo picks up the stage")
    with eager():
        for callback in late:  # now the follow-up arrives
            callback()
    burn_in = stage_runs(node, RunKind.STAGE_BURN_IN)
    assert list(burn_in.values_list("pk", flat=True)) == [first.pk]
    assert not Run.objects.filter(node=node, kind__in=ACTIVE_KINDS, status=RunStatus.CANCELLED).exists()
    send(node, idle_report(node))
    answer_checks(node)
    advance(eager)
    node.refresh_from_db()
    first.refresh_from_db()
    assert first.status == RunStatus.PASSED and node.state == S.PRODUCTION  # soak 0: walks on through


def test_the_orphan_sweep_leaves_a_node_whose_stage_an_operator_opened(node_in, spec, operator, eager):
    """A node whose stage an operator started (another trigger than the entering transition) is
    not an orphan: the sweep finds its open run instead of beginning the stage again."""
    node = node_in(S.INVENTORY_CHECK, hardware_profile=spec.hardware_profile)
    with eager():
        node_services.pass_inventory_check(node.pk, actor=TESTS, reason="inventory as profiled")
    run = stage_runs(node, RunKind.STAGE_BURN_IN).get()
    entered = timezone.now()
    assert services.begin_orphaned_stages(now=entered + services.ORPHAN_GRACE + timedelta(minutes=1)) == 0
    with pytest.raises(services.StageConflict, match="already running"):
        services.start_stage(node.pk, actor=Actor(user=operator), reason="again")
    assert list(stage_runs(node, RunKind.STAGE_BURN_IN).values_list("pk", flat=True)) == [run.pk]


def test_a_cancelled_check_is_asked_again_not_judged_a_hardware_failure(at_inventory, eager, operator):
    """Cancelled is not failed: a burn-in check withdrawn before the agent took it (by an operator,
    or by our own machinery) says nothing about the GPUs, so the stage asks for it again."""
    from checks.services import cancel_check

    node = at_inventory
    send(node, idle_report(node))
    advance(eager)  # inventory passes, burn-in begins
    burn_in = stage_runs(node, RunKind.STAGE_BURN_IN).get()
    withdrawn = burn_in.details["checks"][RunKind.DCGM_DIAG]
    cancel_check(withdrawn, actor=Actor(user=operator), reason="wrong level")
    advance(eager)
    burn_in.refresh_from_db()
    again = burn_in.details["checks"][RunKind.DCGM_DIAG]
    assert burn_in.status == RunStatus.RUNNING and again != withdrawn and burn_in.details["asked_again"] == 1
    answer_checks(node)
    advance(eager)
    node.refresh_from_db()
    assert node.state == S.PRODUCTION
    assert not Finding.objects.filter(node=node, rule=services.FINDING_RULE).exists()
