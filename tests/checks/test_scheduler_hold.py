"""An active check on a production node: the scheduler is asked, and the node is held while it runs.

Against a real Slurm 22.05 cluster (sandbox.emulators.slurm, the tests/schedulers fixtures) and the
Kubernetes stand-in (kmock, because no kube-apiserver can run here; see tests/schedulers).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checks import services
from checks.services import CheckResult
from fleet.choices import SchedulerKind
from nodes import services as node_services
from nodes.choices import NodeState, RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from schedulers.base import OWNER
from schedulers.kubernetes import OWNER_ANNOTATION, REASON_ANNOTATION, TAINT_KEY
from schedulers.slurm import SlurmAdapter
from tests.factories import ClusterFactory, NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("tests")


def production_node(cluster, name: str):
    node = NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster, production=True)
    report_health(node, processes=0)  # NVML sees nothing: a job loading its data has no GPU process yet
    return node


def queue(node, kind: str = "gpu_stress") -> Run:
    return services.request_check(node.pk, kind, actor=ACTOR, reason="routine check")


def passed() -> CheckResult:
    now = timezone.now()
    return CheckResult(
        status="passed", summary="ok", figures={}, output="", started_at=now - timedelta(seconds=60), finished_at=now
    )


def finish(run: Run, capture) -> Run:
    """The agent posts its result; the release runs after the commit, as in a request."""
    with capture(execute=True):
        run, _ = services.record_check_result(run.pk, run.node_id, result=passed())
    run.refresh_from_db()
    return run


def sinfo(slurm, name: str) -> str:
    """State and reason as Slurm's admins see them, without the not-responding mark ("drained*": a
    slurmd another test restarted answers the next ping)."""
    state, _, reason = slurm.run("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E").stdout.strip().partition("|")
    return f"{state.rstrip('*')}|{reason}"


def state(slurm, name: str) -> str:
    """sinfo's long state without the not-responding mark (a resumed node is "idle*" until pinged)."""
    return sinfo(slurm, name).split("|")[0]


# --- Slurm ---------------------------------------------------------------------------------------


def test_a_job_allocated_on_the_node_means_no_check_whatever_nvml_says(slurm, slurm_cluster):
    node = production_node(slurm_cluster, "gpu-s-01")
    run = queue(node)
    job = slurm.submit("gpu-s-01", 60, "customer-train")
    slurm.wait_job_running(job)

    claim = services.claim_checks_for_agent(node.pk)

    assert not claim.idle and claim.runs == []
    assert f"Slurm job(s) {job} allocated on gpu-s-01" in claim.reason
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and not run.scheduler_hold
    assert state(slurm, "gpu-s-01") in ("mixed", "allocated")  # never drained under the job


def test_a_job_that_starts_before_the_hold_gets_the_node_back_and_no_check(slurm, slurm_cluster, monkeypatch):
    node = production_node(slurm_cluster, "gpu-s-02")
    run = queue(node)
    hold = SlurmAdapter.hold_for_check
    started = []

    def job_slips_in(self, node, *, reason):
        # The scheduler starts a job after the idleness answer and before the drain lands.
        started.append(slurm.submit("gpu-s-02", 60, "customer-train"))
        slurm.wait_job_running(started[0])
        return hold(self, node, reason=reason)

    monkeypatch.setattr(SlurmAdapter, "hold_for_check", job_slips_in)

    claim = services.claim_checks_for_agent(node.pk)

    assert not claim.idle and claim.runs == []
    assert claim.reason.startswith("A job started on the node before it was held for the check (Slurm job(s) ")
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and not run.scheduler_hold
    assert state(slurm, "gpu-s-02") in ("mixed", "allocated")  # resumed: the job's node again
    assert slurm.job_state(started[0]) == "R"


def test_an_idle_node_is_drained_while_the_check_runs_and_resumed_after_the_result(
    slurm, slurm_cluster, django_capture_on_commit_callbacks
):
    node = production_node(slurm_cluster, "gpu-s-03")
    run = queue(node)

    (run,) = services.claim_checks_for_agent(node.pk).runs

    assert sinfo(slurm, "gpu-s-03") == f"drained|nodewarden: active check: gpu_stress (run {run.pk})"
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.scheduler_hold
    assert run.details["scheduler_hold"]["ours"] is True
    # What the fleet audit asks: this production node's drain is a check's hold.
    assert Run.objects.filter(node=node, scheduler_hold=True).exists()
    waiting = slurm.submit("gpu-s-03", 30, "customer-eval")  # a job asking for the node waits
    slurm.wait_job_state(waiting, "PD")

    run = finish(run, django_capture_on_commit_callbacks)

    assert run.status == RunStatus.PASSED and not run.scheduler_hold
    assert state(slurm, "gpu-s-03") != "drained"
    slurm.wait_job_running(waiting)  # the node takes work again
    assert NodeEvent.objects.filter(node=node, details__scheduler_hold_released=True).exists()


def test_a_node_cordoned_by_a_finding_meanwhile_stays_drained_after_the_check(
    slurm, slurm_cluster, django_capture_on_commit_callbacks
):
    node = production_node(slurm_cluster, "gpu-s-04")
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs

    node_services.cordon(node.pk, actor=ACTOR, reason="Xid 79 on GPU 3 while the check ran")
    run = finish(run, django_capture_on_commit_callbacks)

    node.refresh_from_db()
    assert node.state == NodeState.TRIAGE
    assert state(slurm, "gpu-s-04") == "drained"  # the lifecycle's cordon now
    assert not run.scheduler_hold  # settled: nothing of the check's left to give back
    event = NodeEvent.objects.get(node=node, details__scheduler_hold_released=False)
    assert "left in place: the node is triage now" in event.reason


def test_a_lifecycle_drain_takes_the_hold_over_and_is_not_lifted(
    slurm, slurm_cluster, django_capture_on_commit_callbacks
):
    node = production_node(slurm_cluster, "gpu-s-01")
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs

    SlurmAdapter(slurm_cluster).drain(node, reason="drain requested in Nodewarden")
    assert sinfo(slurm, "gpu-s-01") == "drained|nodewarden: drain requested in Nodewarden"
    run = finish(run, django_capture_on_commit_callbacks)  # the node is still in production in the database

    assert sinfo(slurm, "gpu-s-01") == "drained|nodewarden: drain requested in Nodewarden"
    assert not run.scheduler_hold


def test_an_admins_drain_before_the_check_is_never_lifted(slurm, slurm_cluster, django_capture_on_commit_callbacks):
    node = production_node(slurm_cluster, "gpu-s-02")
    slurm.run("scontrol", "update", "nodename=gpu-s-02", "state=drain", "reason=admin: bad DIMM")

    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs  # the admin's drain keeps jobs off

    run.refresh_from_db()
    assert not run.scheduler_hold and run.details["scheduler_hold"]["ours"] is False
    finish(run, django_capture_on_commit_callbacks)
    assert sinfo(slurm, "gpu-s-02") == "drained|admin: bad DIMM"


def test_an_admins_drain_during_the_check_is_never_lifted(slurm, slurm_cluster, django_capture_on_commit_callbacks):
    node = production_node(slurm_cluster, "gpu-s-03")
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs

    slurm.run("scontrol", "update", "nodename=gpu-s-03", "state=drain", "reason=admin: PSU swap")
    run = finish(run, django_capture_on_commit_callbacks)

    assert sinfo(slurm, "gpu-s-03") == "drained|admin: PSU swap"
    assert not run.scheduler_hold
    assert NodeEvent.objects.filter(node=node, details__scheduler_hold_released=False).exists()


def test_a_release_that_fails_is_retried_by_the_sweep(slurm, slurm_cluster, django_capture_on_commit_callbacks):
    node = production_node(slurm_cluster, "gpu-s-04")
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs
    endpoint = slurm_cluster.scheduler_endpoint
    slurm_cluster.scheduler_endpoint = "/nonexistent/slurm.conf"  # the scheduler cannot be reached
    slurm_cluster.save()

    run = finish(run, django_capture_on_commit_callbacks)
    assert run.status == RunStatus.PASSED and run.scheduler_hold  # not lost: still to give back
    assert sinfo(slurm, "gpu-s-04").startswith("drained|nodewarden: active check")
    assert services.expire_stale_checks() == 0 and run.scheduler_hold  # still unreachable: kept

    slurm_cluster.scheduler_endpoint = endpoint
    slurm_cluster.save()
    services.expire_stale_checks()

    run.refresh_from_db()
    assert not run.scheduler_hold
    assert state(slurm, "gpu-s-04") != "drained"


def test_an_expired_check_gives_the_node_back(slurm, slurm_cluster):
    node = production_node(slurm_cluster, "gpu-s-01")
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs

    services.expire_stale_checks(now=run.deadline + timedelta(seconds=1))

    run.refresh_from_db()
    assert run.status == RunStatus.ERROR and not run.scheduler_hold
    assert state(slurm, "gpu-s-01") != "drained"


def test_a_scheduler_that_cannot_be_asked_means_not_idle(db):
    cluster = ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint="/nonexistent/slurm.conf")
    node = production_node(cluster, "gpu-s-05")
    run = queue(node)

    claim = services.claim_checks_for_agent(node.pk)

    assert not claim.idle and claim.runs == []
    assert claim.reason.startswith(
        "The workload scheduler could not be asked whether a job is allocated: "
        "Slurm configuration /nonexistent/slurm.conf"
    )
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_node_out_of_production_is_not_held_again(slurm, slurm_cluster):
    node = NodeFactory(hostname="gpu-s-02.dc1.example.net", cluster=slurm_cluster, triage=True)
    report_health(node, processes=0)
    (run,) = services.claim_checks_for_agent(queue(node).node_id).runs

    assert not run.scheduler_hold
    assert state(slurm, "gpu-s-02") == "idle"  # the lifecycle cordons, not the check


# --- Kubernetes ----------------------------------------------------------------------------------


@pytest.fixture
def kube_node(kube, settings):
    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": "t0ken"}
    cluster = ClusterFactory(name="gpu-east", scheduler_kind=SchedulerKind.KUBERNETES, scheduler_endpoint=kube.url)
    kube.add_node("gpu-node-01")
    return production_node(cluster, "gpu-node-01")


def test_kubernetes_a_work_pod_on_the_node_means_no_check(kube, kube_node):
    kube.add_pod("trainer-0", node="gpu-node-01")
    run = queue(kube_node)

    claim = services.claim_checks_for_agent(kube_node.pk)

    assert not claim.idle and "1 work pod(s) on gpu-node-01: ml/trainer-0" in claim.reason
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert not kube.node("gpu-node-01")["spec"].get("unschedulable")


def test_kubernetes_the_node_is_cordoned_and_tainted_for_the_check_and_given_back(
    kube, kube_node, django_capture_on_commit_callbacks
):
    (run,) = services.claim_checks_for_agent(queue(kube_node).node_id).runs

    state = kube.node("gpu-node-01")
    assert state["spec"]["unschedulable"] is True
    assert state["spec"]["taints"] == [
        {"key": TAINT_KEY, "value": f"active-check-gpu_stress-run-{run.pk}", "effect": "NoSchedule"}
    ]
    assert state["metadata"]["annotations"] == {
        OWNER_ANNOTATION: OWNER,
        REASON_ANNOTATION: f"active check: gpu_stress (run {run.pk})",
    }

    finish(run, django_capture_on_commit_callbacks)

    state = kube.node("gpu-node-01")
    assert not state["spec"].get("unschedulable") and not state["spec"].get("taints")
    assert OWNER_ANNOTATION not in state["metadata"]["annotations"]


def test_kubernetes_a_cordon_taken_over_meanwhile_is_not_lifted(kube, kube_node, django_capture_on_commit_callbacks):
    (run,) = services.claim_checks_for_agent(queue(kube_node).node_id).runs
    from schedulers.base import adapter_for

    adapter_for(kube_node.cluster).cordon(kube_node, reason="GPU 3 Xid 79")  # a lifecycle cordon of ours

    run = finish(run, django_capture_on_commit_callbacks)

    state = kube.node("gpu-node-01")
    assert state["spec"]["unschedulable"] is True
    assert state["metadata"]["annotations"][REASON_ANNOTATION] == "GPU 3 Xid 79"
    assert not run.scheduler_hold
