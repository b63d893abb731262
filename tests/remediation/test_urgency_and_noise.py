"""Two ways the loop acted wrongly on what it was told.

- A catastrophic XID arriving with a milder finding (e.g. the NVML recovery action its XID
  implies) was downgraded: the milder one was considered first and set "drain when the job
  ends". The most severe open finding decides, whatever the arrival order.
- Noise became technician tickets on idle nodes: a single link flap opened a repair ticket within
  a second. A finding whose condition can clear by itself waits for its rule's confirmation window
  before anything disruptive or a ticket, idle node or busy; if it clears, the remediation stands
  down and the node stays with customers.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from health.services import clear_condition, raise_finding
from nodes.choices import NodeState
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation
from repairs.models import RepairTicket

pytestmark = pytest.mark.django_db
S = NodeState


def xid79(node):
    raise_finding(
        node.pk,
        rule="xid",
        severity="catastrophic",
        xid=79,
        subject="xid:79",
        gpu_index=3,
        summary="XID 79: GPU has fallen off the bus",
        recommended_action="power_cycle",
    )


def recovery_action(node):
    raise_finding(
        node.pk,
        rule="recovery_action",
        severity="degraded",
        gpu_index=3,
        subject="",
        summary="GPU 3: NVML recovery action: GPU reset required",
        recommended_action="reset_gpu",
    )


@pytest.mark.parametrize("order", ["milder first", "catastrophic first"])
def test_the_most_severe_finding_decides_whatever_the_order(order, fleet, eager, busy_scheduler):
    node = fleet[0]
    with eager():  # both in one ingest: considered in the order they were written
        for raise_one in (recovery_action, xid79) if order == "milder first" else (xid79, recovery_action):
            raise_one(node)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert rem.urgency == Urgency.NOW, rem.decisions
    assert ("evict", node.hostname) in busy_scheduler.calls  # the customer's job did not keep a dead GPU
    assert node.state not in (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING)
    assert rem.steps.order_by("started").first().rung == Rung.POWER_CYCLE  # the worse finding's first rung


def link_flap(node):
    raise_finding(
        node.pk,
        rule="ib_port_down",
        severity="degraded",
        subject="mlx5_3/1",
        summary="IB port mlx5_3/1 is DOWN / Polling",
        recommended_action="inspect",
    )


def test_a_flap_on_an_idle_node_waits_and_stands_down_when_it_clears(fleet, eager, settle):
    node = fleet[1]  # no workload scheduler: nothing runs on it
    with eager():
        link_flap(node)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert node.state == S.DRAIN_PENDING and rem.status == Status.DRAINING  # held, no new work, nothing done
    assert not RepairTicket.objects.filter(node=node).exists()
    settle()
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING  # still confirming
    clear_condition(node.pk, rule="ib_port_down", subject="mlx5_3/1", reason="port ACTIVE / LinkUp again")
    settle()
    node.refresh_from_db()
    rem.refresh_from_db()
    assert node.state == S.PRODUCTION and rem.status == Status.CLEARED, rem.decisions
    assert not RepairTicket.objects.filter(node=node).exists()


def test_a_port_still_down_after_the_window_goes_to_a_technician(fleet, eager, settle):
    node = fleet[2]
    with eager():
        link_flap(node)
    later = timezone.now() + timedelta(minutes=16)  # past ib_port_down's 15-minute confirmation window
    with time_machine.travel(later, tick=False):
        settle(now=later)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert rem.status == Status.HANDED_OFF and node.state == S.REPAIR, rem.decisions
    assert RepairTicket.objects.filter(node=node).count() == 1


def test_a_catastrophic_finding_on_a_busy_node_is_not_held_for_confirmation(fleet, eager, busy_scheduler):
    node = fleet[3]
    with eager():
        xid79(node)
    node.refresh_from_db()
    assert ("evict", node.hostname) in busy_scheduler.calls and node.state != S.DRAIN_PENDING
