"""A held active check gives way: a job pending for the node, or its customer asking, preempts it.

Against a real Slurm 22.05 cluster (sandbox.emulators.slurm, the tests/schedulers fixtures): the
check's drain is lifted and the waiting job starts. The agent side (the check process killed) is
in tests/agent/test_check_preemption.py.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from checks import services
from checks.services import CheckConflict, CheckResult
from health.models import Finding
from nodes.choices import RunStatus
from nodes.models import NodeEvent, Run
from nodes.services import Actor
from tests.factories import NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("tests")


def held_check(cluster, name: str) -> Run:
    """A gpu_stress run claimed on a production node of the cluster, the node held for it."""
    node = NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster, production=True)
    report_health(node, processes=0)
    services.request_check(node.pk, "gpu_stress", actor=ACTOR, reason="routine check")
    (run,) = services.claim_checks_for_agent(node.pk).runs
    run.refresh_from_db()
    assert run.scheduler_hold
    return run


def failed() -> CheckResult:
    now = timezone.now()
    return CheckResult(
        status="failed", summary="killed", figures={}, output="", started_at=now - timedelta(seconds=9), finished_at=now
    )


def test_a_job_arriving_mid_check_aborts_the_check_and_the_job_starts(
    slurm, slurm_cluster, django_capture_on_commit_callbacks
):
    run = held_check(slurm_cluster, "gpu-s-01")
    assert slurm.node_state("gpu-s-01").rstrip("*") == "drained"
    assert services.preempt_wanted_checks() == 0  # nothing waits for the node: the check carries on

    submitted = time.monotonic()
    job = slurm.submit("gpu-s-01", 60, "customer-train")
    slurm.wait_job_state(job, "PD")
    with django_capture_on_commit_callbacks(execute=True):  # the hold goes back after the commit
        assert services.preempt_wanted_checks() == 1
    slurm.wait_job_running(job, timeout=30)
    took = time.monotonic() - submitted

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and not run.scheduler_hold
    assert run.details["preempted"]["by"] == "system:scheduler"
    assert run.details["preempted"]["reason"].startswith(f"The workload scheduler wants the node: Slurm job {job} asks")
    assert run.summary.startswith("Preempted: ")
    assert NodeEvent.objects.filter(node=run.node, details__check_preempted="gpu_stress").exists()
    assert NodeEvent.objects.filter(node=run.node, details__scheduler_hold_released=True).exists()
    assert services.run_is_wanted(run.pk, run.node_id)[1] is False
    print(f"job {job}: submitted -> running in {took:.1f} s (sweep run once the job was pending)")
    assert took < 30


def test_a_job_for_another_node_or_held_back_by_a_dependency_does_not_preempt(slurm, slurm_cluster):
    run = held_check(slurm_cluster, "gpu-s-02")
    elsewhere = slurm.submit("gpu-s-03", 60, "customer-eval")
    slurm.wait_job_running(elsewhere)
    waiting = slurm.run(
        "sbatch",
        "--parsable",
        "-w",
        "gpu-s-02",
        f"--dependency=afterok:{elsewhere}",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 5",
    ).stdout.strip()
    slurm.wait_job_state(waiting, "PD")

    assert services.preempt_wanted_checks() == 0

    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.scheduler_hold


def test_a_job_waiting_in_the_nodes_partition_preempts(slurm, slurm_cluster, django_capture_on_commit_callbacks):
    run = held_check(slurm_cluster, "gpu-s-04")
    for name in ("gpu-s-01", "gpu-s-02", "gpu-s-03"):  # every other node busy
        slurm.wait_job_running(slurm.submit(name, 60, "customer-train"))
    # A whole node, any in the partition: the busy ones cannot take it, only the held one could.
    job = slurm.run("sbatch", "--parsable", "-p", "batch", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 60")
    job_id = job.stdout.strip()
    slurm.wait_job_state(job_id, "PD")

    with django_capture_on_commit_callbacks(execute=True):
        assert services.preempt_wanted_checks() == 1

    slurm.wait_job_running(job_id, timeout=30)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert "in partition batch is pending" in run.details["preempted"]["reason"]


def test_a_late_result_of_a_preempted_check_is_acknowledged_not_recorded(
    slurm, slurm_cluster, django_capture_on_commit_callbacks
):
    run = held_check(slurm_cluster, "gpu-s-03")
    with django_capture_on_commit_callbacks(execute=True):
        services.preempt_check(run.pk, actor=ACTOR, reason="operator needs the node")

    recorded, changed = services.record_check_result(run.pk, run.node_id, result=failed())

    assert not changed and recorded.status == RunStatus.CANCELLED
    assert not Finding.objects.filter(node=run.node).exists()
    with pytest.raises(CheckConflict, match="Only a running check can be preempted"):
        services.preempt_check(run.pk, actor=ACTOR, reason="again")


# --- Asked for the node back: the API (a node without a workload scheduler: nothing to hold) ------


def running(node) -> Run:
    services.request_check(node.pk, "gpu_stress", actor=ACTOR, reason="routine check")
    (run,) = services.claim_checks_for_agent(node.pk).runs
    return run


def give_back(client, node, reason="training starts now"):
    return client.post(f"/api/nodes/{node.pk}/give-back/", {"reason": reason}, format="json")


def test_the_customer_takes_the_node_back_and_the_agent_is_told_to_stop(api_as, customer, agent, idle_node):
    run = running(idle_node)
    assert agent.get(f"/api/agent/checks/{run.pk}/").json() == {
        "id": run.pk,
        "status": "running",
        "wanted": True,
        "reason": "The check is still wanted.",
    }

    answer = give_back(api_as(customer), idle_node)

    assert answer.status_code == 200, answer.content
    assert [(r["id"], r["status"]) for r in answer.json()["preempted"]] == [(run.pk, "cancelled")]
    event = NodeEvent.objects.get(node=idle_node, details__check_preempted="gpu_stress")
    assert event.actor_name == "acme-user" and event.reason == "GPU stress test preempted: training starts now"
    state = agent.get(f"/api/agent/checks/{run.pk}/").json()
    assert state["wanted"] is False and state["reason"] == "Preempted by acme-user: training starts now"
    late = {"status": "failed", "summary": "killed", "started_at": "2026-01-01T00:00:00Z"}
    answer = agent.post(f"/api/agent/checks/{run.pk}/result/", {**late, "finished_at": "2026-01-01T00:01:00Z"})
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"  # acknowledged, not recorded
    assert not Finding.objects.filter(node=idle_node).exists()


def test_who_may_take_a_node_back(api_as, operator, viewer, idle_node, other_tenant):
    from tests.factories import UserFactory

    run = running(idle_node)
    assert give_back(api_as(UserFactory(username="globex-user", tenant=other_tenant)), idle_node).status_code == 404
    assert give_back(api_as(viewer), idle_node).status_code == 403  # staff who only look
    assert give_back(api_as(operator), idle_node, reason="").status_code == 400
    assert give_back(api_as(operator), idle_node).status_code == 200
    assert give_back(api_as(operator), idle_node).status_code == 409  # nothing runs any more
    run.refresh_from_db()
    assert run.details["preempted"]["by"] == "operator"


def test_only_the_runs_own_agent_may_ask_about_it(agent_for, agent, idle_node):
    run = running(idle_node)
    assert agent.get(f"/api/agent/checks/{run.pk}/").status_code == 200
    assert agent_for(NodeFactory(production=True)).get(f"/api/agent/checks/{run.pk}/").status_code == 404
    assert agent.get("/api/agent/checks/999999999999999999999/").status_code in (400, 404)


# --- Kubernetes (the kmock stand-in: no kube-apiserver can run here, see tests/schedulers) ------------


def test_kubernetes_a_pod_the_scheduler_could_not_place_preempts_the_check(
    kube, settings, django_capture_on_commit_callbacks
):
    from fleet.choices import SchedulerKind
    from tests.factories import ClusterFactory

    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": "t0ken"}
    cluster = ClusterFactory(name="gpu-east", scheduler_kind=SchedulerKind.KUBERNETES, scheduler_endpoint=kube.url)
    kube.add_node("gpu-node-01", labels={"pool": "h100"})
    run = held_check(cluster, "gpu-node-01")
    kube.add_pod("other-pool-0", node="", phase="Pending", node_selector={"pool": "a100"})
    kube.add_pod("running-0", node="gpu-node-02")
    assert services.preempt_wanted_checks() == 0  # nothing that could run on this node waits

    kube.add_pod("trainer-0", node="", phase="Pending", node_selector={"pool": "h100"})
    with django_capture_on_commit_callbacks(execute=True):
        assert services.preempt_wanted_checks() == 1

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and not run.scheduler_hold
    assert "pod ml/trainer-0 is pending: 0/4 nodes are available" in run.details["preempted"]["reason"]
    assert not kube.node("gpu-node-01")["spec"].get("unschedulable")
