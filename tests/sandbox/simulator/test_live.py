"""The simulator in a live fleet (the demo): faults planted at the published rates, sped up,
shown in the agents' reports, and cured only by what would cure them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from remediation.models import Remediation, RemediationStep
from sandbox.simulator import faults as F
from sandbox.simulator.live import cure, inject, keep_failing, show
from sandbox.simulator.models import LiveFault
from telemetry.testing import make_report
from tests.factories import NodeFactory

NOW = datetime(2026, 2, 2, 12, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def revalidated(node, at: datetime, **details) -> None:
    with time_machine.travel(at, tick=False):
        NodeEvent.objects.create(
            node=node,
            hostname=node.hostname,
            kind=EventKind.TRANSITION,
            transition="revalidate",
            source_state="remediating",
            target_state="burn_in",
            reason="test",
            details=details,
            actor_name="system:test",
        )


def passed_step(node, rung: str) -> Remediation:
    """A rung whose action was carried out: the node is re-validating (its step verifying)."""
    rem = Remediation.objects.create(node=node, status="validating", urgency="now", rung=rung)
    RemediationStep.objects.create(remediation=rem, rung=rung, status="verifying", deadline=NOW, acted_at=NOW)
    return rem


def test_faults_arrive_at_the_published_rates_times_the_scale():
    nodes = [NodeFactory(state=NodeState.PRODUCTION).pk for _ in range(50)]
    planted = inject(nodes, minutes=60 * 24, scale=200, rng=random.Random(3), now=NOW)
    # 50 nodes x 3.79 per 1000 node-days x 200 = 37.9 expected (less software and NCCL: no signature), plus noise
    expected = sum(f.per_node_day for f in F.FAULTS + F.NOISE if f.signature != F.NONE) * 50 * 200
    assert 0.6 * expected < len(planted) <= 50  # one fault per node at a time
    assert len({f.node_id for f in planted}) == len(planted)
    assert all(f.fault in F.BY_KEY for f in planted)
    again = inject(nodes, minutes=60, scale=200, rng=random.Random(4), now=NOW)
    assert not {f.node_id for f in again} & {f.node_id for f in planted}  # busy nodes get no second fault


def test_a_rung_cures_only_what_it_reaches_and_a_repair_cures_anything():
    gpu_node, hbm_node = NodeFactory(), NodeFactory()
    gpu = LiveFault.objects.create(node=gpu_node, fault="faulty_gpu", cure=F.POWER_CYCLE, xid=79, started=NOW)
    hbm = LiveFault.objects.create(node=hbm_node, fault="hbm", cure=F.RMA, started=NOW)
    revalidated(gpu_node, NOW + timedelta(minutes=5), remediation=passed_step(gpu_node, "reboot").pk)
    revalidated(hbm_node, NOW + timedelta(minutes=5), remediation=passed_step(hbm_node, "reimage").pk)
    assert cure(NOW + timedelta(minutes=6)) == []  # a reboot is not a power cycle; a reimage no new GPU
    Remediation.objects.filter(node=gpu_node).update(status="succeeded")
    revalidated(gpu_node, NOW + timedelta(minutes=30), remediation=passed_step(gpu_node, "power_cycle").pk)
    revalidated(hbm_node, NOW + timedelta(hours=30), repair_ticket=7)  # back from the technician
    assert {f.pk for f in cure(NOW + timedelta(hours=31))} == {gpu.pk, hbm.pk}
    gpu.refresh_from_db()
    hbm.refresh_from_db()
    assert gpu.cured_by == "rung power_cycle" and hbm.cured_by == "technician"


def test_noise_goes_away_by_itself():
    flap = LiveFault.objects.create(node=NodeFactory(), fault="link_flap", started=NOW, ends=NOW + timedelta(minutes=2))
    assert cure(NOW + timedelta(minutes=1)) == []
    assert [f.pk for f in cure(NOW + timedelta(minutes=3))] == [flap.pk]


def test_reports_carry_the_signature_and_a_dead_host_none():
    node = NodeFactory()
    row = LiveFault.objects.create(node=node, fault="sram", cure=F.REBOOT, gpu=2, xid=48, started=NOW)
    from sandbox.simulator.live import signals_by_node

    report = show(make_report(node.hostname, collected_at=NOW), signals_by_node([node.pk], NOW)[node.pk], NOW)
    assert report["xid_events"][0]["xid"] == 48 and report["gpus"][2]["recovery_action"] == 1
    row.refresh_from_db()
    assert row.announced
    later = show(make_report(node.hostname, collected_at=NOW), signals_by_node([node.pk], NOW)[node.pk], NOW)
    assert "xid_events" not in later  # the kernel printed it once
    LiveFault.objects.create(node=node, fault="psu", cure=F.REPAIR, started=NOW)
    assert show(make_report(node.hostname, collected_at=NOW), signals_by_node([node.pk], NOW)[node.pk], NOW) is None


def test_the_task_is_off_unless_the_demo_is_on(settings):
    settings.NODEWARDEN_DEMO_CHURN = False
    assert keep_failing() == "disabled"
    settings.NODEWARDEN_DEMO_CHURN = True
    assert keep_failing() == "no demo fleet"
