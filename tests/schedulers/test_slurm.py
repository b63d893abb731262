"""SlurmAdapter against a real Slurm 22.05 cluster (munged + slurmctld + one slurmd per node)."""

from __future__ import annotations

import time

import pytest

from fleet.choices import SchedulerKind
from sandbox.emulators.slurm import SlurmCluster
from schedulers.base import OWNER, SchedulerConflict, SchedulerError, adapter_for
from schedulers.slurm import SlurmAdapter
from tests.factories import ClusterFactory, NodeFactory

from .conftest import require_slurm

pytestmark = pytest.mark.django_db


def wait_until(condition, timeout: float = 15.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)
    return result


def pending_reason(slurm: SlurmCluster, job: str) -> str:
    return slurm.run("squeue", "-h", "-j", job, "-o", "%r").stdout.strip()


def test_adapter_for_a_slurm_cluster_is_the_slurm_adapter(slurm_cluster):
    assert isinstance(adapter_for(slurm_cluster), SlurmAdapter)


def test_a_drained_node_keeps_its_job_running_and_is_drained_when_the_job_ends(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-01")
    job = slurm.submit("gpu-s-01", 3, "customer-train")
    # Drained before it reaches R, the node would go straight to drained with the job still pending.
    slurm.wait_job_running(job)
    assert adapter.is_running_work(node)

    adapter.drain(node, reason="GPU 3 Xid 79")

    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.running_jobs, state.owner) == (True, False, 1, OWNER)
    assert state.detail.startswith("State=MIXED+DRAIN Reason=nodewarden: GPU 3 Xid 79 [root@")
    assert slurm.node_state("gpu-s-01") == "draining" and slurm.job_state(job) == "R"

    wait_until(lambda: adapter.drain_state(node).drained, what="the job to end and the node to drain")
    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.running_jobs, state.owner) == (True, True, 0, OWNER)
    assert state.detail.startswith("State=IDLE+DRAIN ")
    assert slurm.node_state("gpu-s-01") == "drained" and not adapter.is_running_work(node)


def test_a_job_pinned_to_a_draining_node_waits_and_runs_after_uncordon(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-02")
    running = slurm.submit("gpu-s-02", 60, "customer-train")
    slurm.wait_job_running(running)
    adapter.drain(node, reason="firmware upgrade")

    waiting = slurm.submit("gpu-s-02", 60, "customer-eval")
    wait_until(lambda: "ReqNodeNotAvail" in pending_reason(slurm, waiting), what="the scheduler to pass it over")
    assert slurm.job_state(waiting) == "PD" and adapter.drain_state(node).running_jobs == 1

    adapter.uncordon(node, reason="firmware upgrade cancelled")

    # The node has two CPUs and the running job holds one: the waiting job starts there now.
    slurm.wait_job_running(waiting)
    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.running_jobs, state.owner) == (False, False, 2, None)


def test_draining_and_resuming_twice_is_harmless(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-03")
    adapter.uncordon(node, reason="never drained")  # Slurm refuses to resume an idle node; we do nothing

    adapter.drain(node, reason="burn-in")
    first = adapter.drain_state(node)
    adapter.drain(node, reason="burn-in")
    adapter.cordon(node, reason="burn-in")
    assert adapter.drain_state(node) == first  # same reason: untouched, same timestamp
    assert (first.cordoned, first.drained, first.running_jobs, first.owner) == (True, True, 0, OWNER)
    adapter.cordon(node, reason="Triage: burn-in failed")  # our reason follows the node's state
    again = adapter.drain_state(node)
    assert "nodewarden: Triage: burn-in failed" in again.detail and again.owner == OWNER

    adapter.uncordon(node, reason="burn-in passed")
    adapter.uncordon(node, reason="burn-in passed")
    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.owner) == (False, False, None)
    slurm.wait_node_state("gpu-s-03", "idle")  # idle* until slurmd answers the next ping


def test_it_refuses_to_lift_an_admins_drain(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-04")
    slurm.run("scontrol", "update", "nodename=gpu-s-04", "state=drain", "reason=admin: bad DIMM")

    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.owner) == (True, True, "root")
    with pytest.raises(SchedulerConflict, match=r"drained by root at \S+ with reason 'admin: bad DIMM'"):
        adapter.uncordon(node, reason="checks passed")

    adapter.drain(node, reason="our own maintenance")  # no takeover: the admin's drain stays theirs
    assert adapter.drain_state(node).owner == "root"
    assert slurm.run("sinfo", "-h", "-n", "gpu-s-04", "-o", "%T|%E").stdout.strip() == "drained|admin: bad DIMM"


def test_evict_requeues_the_running_job_at_once(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-01")
    job = slurm.submit("gpu-s-01", 60, "customer-train")
    slurm.wait_job_running(job)

    adapter.evict(node, reason="GPU fell off the bus")

    assert slurm.job_state(job) in ("CG", "PD")
    state = adapter.drain_state(node)
    assert state.cordoned and state.owner == OWNER
    assert f"Reason=nodewarden: GPU fell off the bus (evicted: requeued {job})" in state.detail
    wait_until(lambda: adapter.drain_state(node).drained, what="the node to drain")
    # Back in the queue, waiting for a node it may use (it is pinned to this one).
    assert slurm.job_state(job) == "PD"


def test_evict_cancels_a_job_that_cannot_be_requeued_and_says_so(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-02")
    job = slurm.submit("gpu-s-02", 60, "interactive-ish", requeue=False)
    slurm.wait_job_running(job)

    adapter.evict(node, reason="PSU failure")

    assert slurm.job_state(job) in ("CG", "")
    wait_until(
        lambda: "JobState=CANCELLED" in slurm.run("scontrol", "show", "job", job).stdout, what="the job to be cancelled"
    )  # COMPLETING while its processes are killed
    assert f"(evicted: cancelled {job} (not requeueable))" in adapter.drain_state(node).detail


def test_an_unknown_node_is_a_scheduler_error_that_names_the_command(adapter, slurm_cluster):
    node = NodeFactory(hostname="gpu-s-99.dc1.example.net", cluster=slurm_cluster)
    with pytest.raises(
        SchedulerError,
        match=r"^scontrol show node gpu-s-99 \(SLURM_CONF=/\S+\) exited 1: "
        r"Node gpu-s-99 not found$",
    ):
        adapter.drain(node, reason="x")
    with pytest.raises(SchedulerError, match=r"^squeue -h -w gpu-s-99 .* exited 1: .*Invalid node name gpu-s-99"):
        adapter.is_running_work(node)


def test_a_hostlist_expression_is_never_sent_to_slurm():
    adapter = SlurmAdapter(ClusterFactory.build(scheduler_kind=SchedulerKind.SLURM))
    with pytest.raises(SchedulerError, match="not a plain Slurm node name"):
        adapter.drain(NodeFactory.build(hostname="gpu-s-[01-04].dc1.example.net"), reason="x")


def test_a_missing_slurm_conf_is_a_scheduler_error_at_once():
    # Slurm's own commands would retry for 60 s before saying so.
    cluster = ClusterFactory.build(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint="/nonexistent/slurm.conf")
    with pytest.raises(SchedulerError, match=r"^Slurm configuration /nonexistent/slurm.conf .* is not a file$"):
        SlurmAdapter(cluster).drain_state(NodeFactory.build(hostname="gpu-s-01"))


def test_a_slow_command_times_out_as_a_scheduler_error(adapter, slurm_node):
    adapter.command_timeout = 0.001
    with pytest.raises(SchedulerError, match=r"^scontrol show node gpu-s-03 .* timed out after 0.001 s$"):
        adapter.drain_state(slurm_node("gpu-s-03"))


def test_without_a_conf_path_it_uses_the_environments_slurm(slurm, slurm_node, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf_path))
    cluster = ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint="slurmctld.dc1.example.net")
    assert adapter_for(cluster).drain_state(slurm_node("gpu-s-03")).cordoned is False


def test_a_node_without_slurmd_can_be_drained_and_resumed():
    require_slurm()
    # Its own cluster: a node nobody answers for slows the pings of the whole cluster.
    with SlurmCluster(["gpu-s-08"], dead_nodes=["gpu-s-09"]) as slurm:
        adapter = SlurmAdapter(ClusterFactory.build(scheduler_kind="slurm", scheduler_endpoint=str(slurm.conf_path)))
        node = NodeFactory.build(hostname="gpu-s-09")
        adapter.drain(node, reason="never came up")
        state = adapter.drain_state(node)
        assert (state.cordoned, state.drained, state.owner) == (True, True, OWNER)
        assert state.detail.startswith("State=UNKNOWN+DRAIN")  # +NOT_RESPONDING after the first ping

        # Slurm answers the resume with "Invalid node state specified" but clears DRAIN.
        adapter.uncordon(node, reason="giving up")
        assert adapter.drain_state(node).cordoned is False
