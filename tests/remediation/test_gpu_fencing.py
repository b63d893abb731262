"""Fence the GPU instead of draining the node (remediation.fencing): a degraded finding naming one
GPU of a production node where a customer job runs. The scheduler is the ``busy_scheduler``
stand-in (the adapters' own fencing is tested against real Slurm and the Kubernetes stand-in in
tests/schedulers/test_gpu_fencing.py); the BMC is the Redfish emulator of the remediation tests."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from audit import invariants
from audit.services import context
from health.models import Alert
from health.services import raise_finding
from nodes.choices import GpuHealth, NodeState
from nodes.models import NodeEvent
from remediation.choices import Status, Urgency
from remediation.models import Remediation
from tests.factories import GPUFactory

pytestmark = pytest.mark.django_db
S = NodeState


def ecc(node, index=3, severity="degraded"):
    raise_finding(
        node.pk,
        rule="xid",
        severity=severity,
        xid=94 if severity == "degraded" else 79,
        subject=f"xid:{94 if severity == 'degraded' else 79}",
        gpu_index=index,
        summary=f"XID on GPU {index}",
        recommended_action="power_cycle",
    )


def audit_later():
    """The auditor's unhandled-alert rule, an hour on (past its grace)."""
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        return {o.invariant: o for o in invariants.unhandled_alerts(context())}["unhandled_alert"]


@pytest.fixture
def gpus(fleet):
    node = fleet[0]
    for index in range(8):
        GPUFactory(node=node, index=index)
    return node


def test_a_degraded_gpu_finding_under_a_job_fences_the_gpu_and_the_node_serves_on(gpus, eager, busy_scheduler):
    busy_scheduler.fences = True
    node = gpus
    with eager():
        ecc(node)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert (rem.status, node.state) == (Status.FENCED, S.PRODUCTION), rem.decisions
    gpu = node.gpus.get(index=3)
    assert gpu.health == GpuHealth.FENCED
    fence = NodeEvent.objects.get(node=node, transition="fence_gpu")
    assert fence.actor_name == "system:remediation:fence"
    assert f"Remediation {rem.pk}: finding" in fence.reason and "XID on GPU 3" in fence.reason
    assert ("fence_gpus", node.hostname) in busy_scheduler.calls
    assert not {("drain", node.hostname), ("evict", node.hostname)} & set(busy_scheduler.calls)
    assert node.gpus.filter(health=GpuHealth.FENCED).count() == 1  # 7 of 8 usable
    # The fleet auditor, past its grace: the alert names a fenced GPU, so the fence acts on it.
    outcome = audit_later()
    assert (outcome.breaches, outcome.excused) == ([], 1)


def test_a_second_finding_on_another_gpu_is_still_an_unhandled_alert(gpus, eager, busy_scheduler):
    busy_scheduler.fences = True
    node = gpus
    with eager():
        ecc(node, 3)
    # Recorded without its remediation (no eager): nothing acts on GPU 5's alert.
    raise_finding(node.pk, rule="xid", severity="degraded", xid=94, subject="xid:94", gpu_index=5, summary="GPU 5")
    assert Alert.objects.filter(node=node, state="firing").count() == 2
    outcome = audit_later()
    assert [b.evidence["gpu_index"] for b in outcome.breaches] == [5]


def test_a_catastrophic_gpu_finding_still_cordons_at_once(gpus, eager, busy_scheduler):
    busy_scheduler.fences = True
    node = gpus
    with eager():
        ecc(node, severity="catastrophic")
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert rem.urgency == Urgency.NOW and rem.status != Status.FENCED
    assert NodeEvent.objects.filter(node=node, transition="cordon").exists()  # out at once (then remediated)
    assert ("evict", node.hostname) in busy_scheduler.calls
    assert ("fence_gpus", node.hostname) not in busy_scheduler.calls


@pytest.mark.parametrize("why", ["scheduler cannot", "fencing off", "node idle"])
def test_otherwise_the_node_drains_as_before(why, gpus, eager, busy_scheduler, settings):
    busy_scheduler.fences = why != "scheduler cannot"
    settings.NODEWARDEN_GPU_FENCING = why != "fencing off"
    busy_scheduler.running = why != "node idle"
    node = gpus
    with eager():
        ecc(node)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert rem.status != Status.FENCED, rem.decisions
    assert NodeEvent.objects.filter(node=node, transition="request_drain").exists()  # drained, then remediated
    assert node.gpus.get(index=3).health != GpuHealth.FENCED
    asked = ("fence_gpus", node.hostname) in busy_scheduler.calls
    assert asked is (why == "scheduler cannot")
