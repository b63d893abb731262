"""Remediation with a real Slurm (22.05, munge, slurmctld, slurmd started by the tests):
a degraded finding on a node running a customer job drains it in Slurm; the node stays in
production work (drain pending) until the job ends, then leaves, is power-cycled through its
BMC, re-validated, and returns: Slurm resumes it. A catastrophic finding evicts the job at once."""

from __future__ import annotations

import time

import pytest

from health.services import raise_finding
from nodes.choices import NodeState
from remediation import reconciler
from remediation.choices import Status
from remediation.models import Remediation
from schedulers.slurm import SlurmAdapter

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def on_slurm(fleet, slurm):
    """Two fleet nodes renamed after Slurm nodes, in a cluster pointing at the real Slurm."""
    cluster = fleet[0].cluster
    cluster.scheduler_kind, cluster.scheduler_endpoint = "slurm", str(slurm.conf_path)
    cluster.save()
    nodes = fleet[:2]
    for node, name in zip(nodes, ("gpu-s-01", "gpu-s-02"), strict=True):
        node.hostname = name
        node.save()
    return nodes


def settle(eager, rounds=1):
    from schedulers.reactions import follow_drains

    for _ in range(rounds):
        with eager():
            reconciler.reconcile()
            follow_drains()


def test_a_degraded_node_leaves_only_when_its_slurm_job_ends(on_slurm, slurm, eager):
    node = on_slurm[0]
    job = slurm.submit("gpu-s-01", 4, "customer-train")
    slurm.wait_job_running(job)
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity="degraded",
            xid=94,
            gpu_index=2,
            subject="xid:94",
            summary="XID 94: contained ECC error on GPU 2",
            recommended_action="power_cycle",
        )
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    state = SlurmAdapter(node.cluster).drain_state(node)
    assert node.state == S.DRAIN_PENDING and rem.status == Status.DRAINING
    assert state.cordoned and not state.drained and state.running_jobs == 1 and state.owner == "nodewarden"
    settle(eager)
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING  # the customer's job still runs
    deadline = time.monotonic() + 30
    while not SlurmAdapter(node.cluster).drain_state(node).drained and time.monotonic() < deadline:
        time.sleep(0.2)
    settle(eager, rounds=2)  # the job ended: drained -> draining -> triage -> power cycle -> re-validation
    node.refresh_from_db()
    rem.refresh_from_db()
    assert node.state == S.PRODUCTION and rem.status == Status.SUCCEEDED, rem.decisions
    after = SlurmAdapter(node.cluster).drain_state(node)
    assert not after.cordoned  # Slurm was told the node may take work again


def test_a_catastrophic_finding_evicts_the_running_job_at_once(on_slurm, slurm, eager):
    node = on_slurm[1]
    job = slurm.submit("gpu-s-02", 300, "customer-train")
    slurm.wait_job_running(job)
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
    assert rem.status == Status.SUCCEEDED and node.state == S.PRODUCTION
    assert slurm.job_state(job) in ("PD", "CA", "CG")  # requeued (pending) or cancelled: not left running
