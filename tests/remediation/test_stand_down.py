"""A drain that waits for the customer's job is cancelled if the finding's condition clears
meanwhile (a link that flapped once, a passing hot spell): nothing disruptive is done, the
node stays in production and its scheduler gives it work again. Found necessary by the fleet
simulator, where such signals were most of the false actions.

The workload scheduler here is the simulated one (``sandbox.simulator.scheduler``) with a job that
runs on the node: a real Slurm job would do the same (tests/remediation/test_with_slurm.py
covers the drain itself against Slurm); what is tested is the remediation's decision."""

from __future__ import annotations

import pytest

from health.services import clear_condition, raise_finding
from nodes.choices import NodeState
from remediation import reconciler
from remediation.choices import Status
from remediation.models import Remediation, RemediationPolicy
from sandbox.simulator import scheduler as simulated
from schedulers.base import OWNER
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory
from tests.sandbox.simulator.test_scheduler import World

pytestmark = pytest.mark.django_db
S = NodeState
PORT = "mlx5_3/1"


@pytest.fixture
def node_under_a_job():
    cluster = ClusterFactory(scheduler_kind="simulated")
    profile = HardwareProfileFactory()
    node = NodeFactory(hostname="sim-00007", cluster=cluster, state=S.PRODUCTION, hardware_profile=profile)
    for _ in range(11):  # a cluster big enough that one node out is within the blast-radius limit
        NodeFactory(cluster=cluster, state=S.PRODUCTION, hardware_profile=profile)
    world = World({"sim-00007", "sim-00008"})
    simulated.attach(cluster.pk, world)
    yield node, world
    simulated.detach(cluster.pk)


def flap(node, eager, rule: str = "ib_port_down", **kwargs) -> Remediation:
    with eager():
        raise_finding(
            node.pk,
            rule=rule,
            severity="degraded",
            subject=PORT,
            summary=f"IB port {PORT} is DOWN / Polling",
            recommended_action="inspect",
            **kwargs,
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert (node.state, rem.status) == (S.DRAIN_PENDING, Status.DRAINING)  # the job runs on: drain when it ends
    return rem


def reconcile(eager) -> dict[str, int]:
    with eager():
        return reconciler.reconcile()


def test_a_flap_that_cleared_before_the_job_ended_is_stood_down(node_under_a_job, eager):
    node, world = node_under_a_job
    rem = flap(node, eager)
    assert world.cordons == {"sim-00007": OWNER}
    assert reconcile(eager)["stood_down"] == 0  # still down: the drain keeps waiting
    clear_condition(node.pk, rule="ib_port_down", subject=PORT, reason="port ACTIVE / LinkUp again")
    assert reconcile(eager)["stood_down"] == 1
    node.refresh_from_db()
    rem.refresh_from_db()
    assert node.state == S.PRODUCTION and rem.status == Status.CLEARED and rem.finished is not None
    assert world.cordons == {}  # the scheduler gives it work again
    assert not rem.steps.exists() and len(world.job.interruptions) == 0  # nothing disruptive was done
    event = node.events.filter(transition="cancel_drain").get()
    assert "cleared by itself before the job ended: standing down" in event.reason
    assert "standing down" in rem.decisions[-1]["what"]
    assert reconcile(eager)["stood_down"] == 0  # idempotent


def test_a_policy_may_keep_the_drain(node_under_a_job, eager):
    node, _ = node_under_a_job
    RemediationPolicy.objects.create(
        name="drain flaps anyway", match_rule="ib_port_down", urgency="when_idle", stand_down_if_cleared=False
    )
    rem = flap(node, eager)
    clear_condition(node.pk, rule="ib_port_down", subject=PORT)
    reconcile(eager)
    rem.refresh_from_db()
    assert rem.status == Status.DRAINING


def test_an_xid_going_quiet_is_not_a_cure(node_under_a_job, eager):
    node, _ = node_under_a_job
    rem = flap(node, eager, rule="xid", xid=94)
    clear_condition(node.pk, rule="xid", subject=PORT)  # XID alerts resolve by going quiet, not by a cure
    reconcile(eager)
    rem.refresh_from_db()
    assert rem.status == Status.DRAINING and rem.finished is None
