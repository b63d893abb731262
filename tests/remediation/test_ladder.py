"""From a finding to the right action: by severity and workload, up the ladder, back only after
re-validation, with every decision on the node's history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from health.services import raise_finding
from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from remediation import reconciler, services
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationPolicy

pytestmark = pytest.mark.django_db
S = NodeState


def catastrophic(node, eager, **kwargs):
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity="catastrophic",
            xid=79,
            subject="xid:79",
            gpu_index=3,
            summary="XID 79: GPU has fallen off the bus",
            recommended_action=kwargs.pop("action", "power_cycle"),
            **kwargs,
        )
    node.refresh_from_db()
    return Remediation.objects.filter(node=node).first()


def transitions(node):
    return list(
        NodeEvent.objects.filter(node=node, kind="transition")
        .order_by("created", "id")
        .values_list("transition", flat=True)
    )


def test_a_catastrophic_finding_cordons_power_cycles_revalidates_and_returns_the_node(fleet, eager, emulator):
    node = fleet[0]
    rem = catastrophic(node, eager)
    assert rem.status == Status.SUCCEEDED and rem.rung == Rung.POWER_CYCLE, rem.decisions
    assert node.state == S.PRODUCTION
    assert transitions(node) == [
        "cordon",
        "start_remediation",
        "revalidate",
        "pass_firmware",
        "pass_inventory_check",
        "pass_burn_in",
        "pass_fabric_check",
        "release_to_production",
    ]
    (step,) = rem.steps.all()
    assert step.status == StepStatus.PASSED and "power cycle through the BMC" in step.detail
    why = NodeEvent.objects.filter(node=node, reason__startswith="Remediation: XID 79").get().reason
    assert "default for catastrophic findings" in why and "cordon and act now" in why and "bmc power cycle" in why
    assert emulator.system(0)["PowerState"] == "On"


def test_a_degraded_finding_waits_for_the_job_to_end(fleet, eager, busy_scheduler, settle):
    node = fleet[1]
    with eager():  # an event (not a condition that a clean report must be seen to clear: see test_release_gate)
        raise_finding(
            node.pk,
            rule="xid",
            severity="degraded",
            xid=94,
            gpu_index=1,
            subject="xid:94",
            summary="XID 94: contained ECC error on GPU 1",
            recommended_action="reboot",
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert (node.state, rem.status, rem.urgency) == (S.DRAIN_PENDING, Status.DRAINING, Urgency.WHEN_IDLE)
    assert ("drain", node.hostname) in busy_scheduler.calls
    settle()  # the job still runs
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING
    busy_scheduler.running = False  # the customer's job ended
    settle(2)
    node.refresh_from_db()
    rem.refresh_from_db()
    assert node.state == S.PRODUCTION and rem.status == Status.SUCCEEDED and rem.rung == Rung.REBOOT
    assert ("uncordon", node.hostname) in busy_scheduler.calls


def test_a_warning_is_only_watched(fleet, eager):
    with eager():
        raise_finding(fleet[2].pk, rule="gpu_temperature", severity="warning", summary="GPU 2 warm")
    assert not Remediation.objects.exists()


def test_a_node_failing_again_soon_after_a_rung_starts_on_the_next_one(fleet, eager):
    node = fleet[3]
    first = catastrophic(node, eager)
    assert first.rung == Rung.POWER_CYCLE and first.status == Status.SUCCEEDED
    second = catastrophic(node, eager, observed_at=timezone.now())
    assert second.pk != first.pk and second.rung == Rung.REIMAGE
    assert "climbing to reimage" in second.decisions[0]["what"]
    step = second.steps.get()  # the reimage waits for the reinstalled node's join (tests/e2e/test_reimage.py)
    assert second.status == Status.RUNNING and step.status == StepStatus.RUNNING, step.detail
    assert step.detail.startswith("PXE boot once") and step.boot_generation == 1


def test_a_bmc_that_fails_makes_the_ladder_climb(fleet, eager):
    node = fleet[4]
    node.bmc.address = "http://127.0.0.1:9"
    node.bmc.save()
    rem = catastrophic(node, eager, action="reboot")
    steps = {s.rung: s for s in rem.steps.all()}
    assert steps[Rung.REBOOT].status == StepStatus.FAILED and "BMC" in steps[Rung.REBOOT].detail
    assert steps[Rung.POWER_CYCLE].status == StepStatus.FAILED
    assert steps[Rung.REIMAGE].status == StepStatus.FAILED
    assert rem.rung == Rung.REPAIR  # the ladder ends with a person


def test_a_policy_can_require_approval_and_an_operator_approves_or_stops(fleet, eager, operator):
    RemediationPolicy.objects.create(
        name="xid needs approval", match_rule="xid", urgency=Urgency.NOW, first_rung=Rung.REBOOT, requires_approval=True
    )
    rem = catastrophic(fleet[6], eager)
    assert rem.status == Status.AWAITING_APPROVAL and fleet[6].state == S.PRODUCTION
    with eager():
        services.approve(rem.pk, actor=Actor(user=operator), reason="checked the job owner")
    rem.refresh_from_db()
    assert rem.status == Status.SUCCEEDED
    other = catastrophic(fleet[7], eager)
    services.stop(other.pk, actor=Actor(user=operator), reason="vendor engineer on site")
    other.refresh_from_db()
    assert other.status == Status.STOPPED and "stopped: vendor engineer on site" in other.decisions[-1]["what"]
    with pytest.raises(services.RemediationConflict):
        services.approve(other.pk, actor=Actor(user=operator), reason="x")


def test_a_shadow_policy_records_and_does_nothing(fleet, eager):
    RemediationPolicy.objects.create(name="shadow xid", match_rule="xid", urgency=Urgency.NOW, shadow=True)
    rem = catastrophic(fleet[8], eager)
    assert rem.status == Status.STOPPED and fleet[8].state == S.PRODUCTION


def test_a_stalled_step_is_requeued_and_one_past_its_deadline_climbs(fleet, eager, monkeypatch, settings):
    from remediation import services as svc

    settings.NODEWARDEN_REMEDIATION_STALL_SECONDS = 120
    queued = []
    monkeypatch.setattr(svc, "queue_step", lambda step_id: queued.append(step_id))  # the worker "dies"
    rem = catastrophic(fleet[9], eager)
    step = rem.steps.get()
    assert rem.status == Status.RUNNING and step.status == StepStatus.RUNNING and queued == [step.pk]
    reconciler.reconcile(now=step.started + timedelta(minutes=3))
    assert queued == [step.pk, step.pk]  # re-driven
    reconciler.reconcile(now=step.started + timedelta(minutes=4))
    assert queued == [step.pk, step.pk]  # once per stall delay, not at every pass
    reconciler.reconcile(now=step.deadline + timedelta(seconds=1))
    step.refresh_from_db()
    rem.refresh_from_db()
    assert step.status == StepStatus.FAILED and "timed out" in step.detail and rem.rung == Rung.REIMAGE


def test_a_repeat_offender_goes_straight_to_repair_with_a_ticket(fleet, eager):
    from repairs.models import RepairTicket

    node = fleet[0]
    long_ago = timezone.now() - timedelta(days=5)  # inside the 7 days, outside the 72 h escalation window
    for _ in range(4):
        Remediation.objects.create(
            node=node,
            status=Status.SUCCEEDED,
            urgency=Urgency.NOW,
            rung=Rung.REBOOT,
            created=long_ago,
            finished=long_ago + timedelta(hours=1),
        )
    rem = catastrophic(node, eager)
    assert rem.rung == Rung.REPAIR and rem.status == Status.HANDED_OFF
    assert "repeat offender: 5 incidents in 7 days" in rem.decisions[0]["what"]
    assert node.state == S.REPAIR
    ticket = RepairTicket.objects.get(node=node)
    assert ticket.remediation_id == rem.pk and "XID 79" in ticket.what


def test_the_ladder_ends_with_a_technician_when_every_automated_rung_failed(fleet, eager):
    from repairs.models import RepairTicket

    node = fleet[1]
    node.bmc.address = "http://127.0.0.1:9"
    node.bmc.save()
    rem = catastrophic(node, eager, action="reboot")
    assert rem.status == Status.HANDED_OFF and node.state == S.REPAIR
    assert "reboot (failed), bmc power cycle (failed), reimage (failed)" in RepairTicket.objects.get(node=node).what


def test_a_finding_that_calls_for_an_rma_opens_a_vendor_case_with_the_gpus_serial(fleet, eager):
    from repairs.models import RmaCase
    from tests.factories import GPUFactory

    node = fleet[0]
    GPUFactory(node=node, index=5, serial="1654123456789")
    with eager():
        raise_finding(
            node.pk,
            rule="row_remap_failure",
            severity="catastrophic",
            gpu_index=5,
            subject="",
            summary="GPU 5: row remapping failed (no spare rows)",
            recommended_action="rma",
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    case = RmaCase.objects.get(node=node)
    assert rem.status == Status.HANDED_OFF and rem.rung == Rung.RMA and node.state == S.RMA, rem.decisions
    assert (case.vendor, case.failed_serial) == ("NVIDIA", "1654123456789")


def test_one_remediation_that_fails_does_not_stop_the_reconciler_for_the_others(fleet, eager, monkeypatch):
    """Seen in the demo: an RMA hand-off that raised aborted every pass, so no other stalled
    remediation was ever re-driven. Now the failure is logged and counted; the rest go on."""
    broken, stuck = fleet[0], fleet[1]
    policy = RemediationPolicy.objects.create(
        name="xid approval", match_rule="xid", urgency=Urgency.NOW, requires_approval=True
    )
    first = catastrophic(broken, eager)
    second = catastrophic(stuck, eager)
    assert first.status == second.status == Status.AWAITING_APPROVAL
    policy.delete()
    Remediation.objects.filter(pk__in=(first.pk, second.pk)).update(status=Status.QUEUED)
    real_admit = services.admit

    def admit(remediation_id, **kwargs):
        if remediation_id == first.pk:
            raise RuntimeError("a bug in one remediation")
        return real_admit(remediation_id, **kwargs)

    monkeypatch.setattr(services, "admit", admit)
    with eager():
        counts = reconciler.reconcile()
    second.refresh_from_db()
    assert counts["errors"] == 1 and counts["admitted"] == 1 and second.status == Status.SUCCEEDED
