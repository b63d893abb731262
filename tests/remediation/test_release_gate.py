"""No false recovery: a node goes back to customers only when it is healthy now.

The case seen in the demo: a GPU fell off the bus (XID 79), the node was rebooted, the GPU
stayed missing (the agent reported 7), yet the inventory check passed on the GPU rows of before,
the soak passed because the ongoing problem opened no *new* finding, and the node returned to
production with its remediation "succeeded" while "7 GPUs visible, expected 8" kept firing.
Here the agent's reports go through the real ingest (rules evaluated) and the BMC is the
Redfish emulator.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from health.choices import AlertState
from health.models import Alert
from health.services import raise_finding
from nodes import services as node_services
from nodes.choices import NodeState, RunStatus
from nodes.models import Run
from nodes.services import Actor
from remediation.choices import Rung, Status, StepStatus
from remediation.models import Remediation
from tests.validation.conftest import idle_report, send
from validation import services as validation
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def inventory_and_soak(fleet):
    """Back from remediation, a node walks the inventory check and a one-minute soak."""
    RevalidationPlan.objects.filter(reentry=Reentry.REMEDIATING).update(stages=[Stage.INVENTORY, Stage.RELIABILITY])
    Day1Spec.objects.filter(hardware_profile=fleet[0].hardware_profile).update(soak_seconds=60)
    return fleet


def seven_gpus(node, at, **kwargs):
    report = idle_report(node, at=at, **kwargs)
    report["gpus"] = report["gpus"][:7]  # GPU 7 fell off the bus: NVML no longer lists it
    return report


def advance(eager, now):
    with eager():
        validation.advance_open_stages(now=now)


def test_a_gpu_still_missing_after_the_reboot_never_goes_back_to_production(inventory_and_soak, eager):
    node = inventory_and_soak[0]
    t0 = timezone.now()
    with eager():
        send(node, idle_report(node, at=t0 - timedelta(minutes=5)))  # healthy: GPU rows for all 8
        report = seven_gpus(node, t0 - timedelta(minutes=1), seq=2)
        report["xid_events"] = [
            {
                "xid": 79,
                "observed_at": report["collected_at"],
                "kind": "xid",
                "pci_bus_id": "0000:db:00",
                "message": "GPU has fallen off the bus.",
                "kmsg_seq": 4242,
                "raw": "NVRM: Xid (PCI:0000:db:00): 79, GPU has fallen off the bus.",
            }
        ]
        send(node, report)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert node.state == S.INVENTORY_CHECK and rem.status == Status.VALIDATING  # rebooted, re-validating
    step = rem.steps.get()
    assert step.status == StepStatus.VERIFYING  # not "Passed": its success check has not run yet
    with eager():
        send(node, seven_gpus(node, timezone.now(), seq=3))  # after the reboot: still 7
    advance(eager, timezone.now())
    node.refresh_from_db()
    rem.refresh_from_db()
    inventory = Run.objects.filter(node=node, kind="stage_inventory").earliest("started")  # after the reboot
    assert inventory.status == RunStatus.FAILED and "GPU count 7" in inventory.summary, inventory.summary
    step.refresh_from_db()
    assert step.status == StepStatus.FAILED and "re-validation failed" in step.detail
    assert node.state != S.PRODUCTION and rem.status != Status.SUCCEEDED
    assert step.rung == Rung.REBOOT and rem.rung == Rung.POWER_CYCLE, (
        rem.decisions
    )  # climbed: the reboot did not cure it
    assert Alert.objects.get(node=node, rule="gpu_missing").state == AlertState.FIRING


def test_a_condition_still_firing_holds_the_node_back_and_a_clean_report_lets_it_go(inventory_and_soak, eager):
    node = inventory_and_soak[1]
    with eager():
        send(node, idle_report(node, at=timezone.now() - timedelta(minutes=5)))
        raise_finding(
            node.pk,
            rule="ecc_uncorrectable",
            severity="catastrophic",
            gpu_index=2,
            subject="",
            summary="Uncorrectable ECC on GPU 2",
            recommended_action="power_cycle",
        )
    rem = Remediation.objects.get(node=node)
    now = timezone.now()
    with eager():
        send(node, idle_report(node, at=now))  # after the action: healthy figures, every GPU there
    advance(eager, now)
    node.refresh_from_db()
    assert node.state == S.RELIABILITY_ASSESSMENT  # inventory passed; soaking
    # The soak ends: nothing new fired during it, but is the node healthy *now*? The ECC alert was
    # raised without a report that shows it, then a clean report cleared its condition.
    advance(eager, now + timedelta(seconds=61))
    node.refresh_from_db()
    rem.refresh_from_db()
    assert node.state == S.PRODUCTION and rem.status == Status.SUCCEEDED, rem.decisions
    assert rem.steps.get().status == StepStatus.PASSED


def test_no_report_since_the_action_means_the_condition_was_not_seen_to_clear(fleet, eager):
    node = fleet[2]  # re-validation is the soak alone, and the soak is zero
    with eager():
        raise_finding(
            node.pk,
            rule="nvlink_down",
            severity="catastrophic",
            gpu_index=4,
            subject="",
            summary="GPU 4: 16 of 18 NVLinks up",
            recommended_action="power_cycle",
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    soak = Run.objects.filter(node=node, kind="stage_reliability").latest("started")
    assert soak.status == RunStatus.FAILED and soak.summary.startswith("Still firing, not released: GPU 4: 16 of 18")
    assert node.state != S.PRODUCTION and rem.status != Status.SUCCEEDED
    assert rem.steps.get(rung=Rung.POWER_CYCLE).status == StepStatus.FAILED


def test_an_xid_from_before_the_action_does_not_hold_the_node_back(fleet, eager):
    node = fleet[3]
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity="catastrophic",
            xid=79,
            subject="xid:79",
            gpu_index=0,
            summary="XID 79: GPU has fallen off the bus",
            recommended_action="power_cycle",
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert node.state == S.PRODUCTION and rem.status == Status.SUCCEEDED
    # Back with its customers: the XID of before the power cycle is answered by the re-validation
    # that passed since, not left firing "catastrophic, power cycle" for its quiet period (the demo).
    alert = Alert.objects.get(node=node, rule="xid")
    assert alert.state == AlertState.RESOLVED, alert.state
    assert alert.resolved_reason == "answered: the node passed re-validation since"
    assert not Alert.objects.filter(node=node, state=AlertState.FIRING).exists()


def test_an_xid_seen_during_the_re_validation_stays_firing_when_an_operator_releases_the_node(
    inventory_and_soak, eager
):
    """Only the events the pass answered resolve: one seen since the pass began is left to the gate
    and the auditor, whoever releases the node."""
    node = inventory_and_soak[4]
    RevalidationPlan.objects.filter(reentry=Reentry.REMEDIATING).update(stages=[Stage.RELIABILITY])  # a soak
    xid = {
        "rule": "xid",
        "severity": "catastrophic",
        "xid": 79,
        "subject": "xid:79",
        "gpu_index": 0,
        "summary": "XID 79: GPU has fallen off the bus",
        "recommended_action": "power_cycle",
    }
    with eager():
        raise_finding(node.pk, **xid)
    node.refresh_from_db()
    assert node.state == S.RELIABILITY_ASSESSMENT, node.state  # power cycled, soaking
    operator = Actor.system("test-operator")
    with eager():
        raise_finding(node.pk, **xid)  # again, during the re-validation
        node_services.release_to_production(node.pk, actor=operator, reason="released by hand")
    node.refresh_from_db()
    assert node.state == S.PRODUCTION
    assert Alert.objects.get(node=node, rule="xid").state == AlertState.FIRING
