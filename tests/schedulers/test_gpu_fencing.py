"""Fencing single GPUs in the workload scheduler instead of draining the node.

Slurm: against a real Slurm 22.05 whose nodes have 4 GPUs from gres.conf ``File=`` lines (fake
device files, as every real GPU node has them). slurmctld refuses to change such a node's GPU
count, so ``fence_gpus`` answers False and the node is drained instead; the tests pin what the
real ``scontrol`` accepts. Kubernetes: against kmock's emulator (``kube_stand_in``), over real HTTP;
kmock does not know the node status subresource, so the stand-in serves it (``kube_stand_in``).
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from fleet.choices import SchedulerKind
from nodes import services
from nodes.choices import GpuHealth, NodeState
from nodes.models import GPU, NodeEvent
from schedulers.base import NoScheduler, UnregisteredScheduler
from schedulers.kubernetes import FENCED_GPUS_ANNOTATION, KubernetesAdapter
from schedulers.reactions import follow_drains
from schedulers.slurm import SlurmAdapter
from tests.factories import ClusterFactory, GPUFactory, NodeFactory
from tests.validation.conftest import eager  # noqa: F401

from .kube_stand_in import NODES, kube_fixture  # noqa: F401  (the `kube` fixture)

ACTOR = services.Actor.system("test")


def show(slurm, name: str) -> dict[str, str]:
    out = slurm.run("scontrol", "-d", "show", "node", name).stdout
    return dict(
        line.strip().partition("=")[::2] for line in out.splitlines() if line.strip().startswith(("Gres", "Comment"))
    )


# --- Slurm ------------------------------------------------------------------------------------


@pytest.fixture
def gpu_cluster(db, slurm_gpus):
    return ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint=str(slurm_gpus.conf_path))


def test_real_slurm_refuses_to_lower_a_file_backed_gpu_count(slurm_gpus):
    """What the real controller accepts: the reason a Slurm GPU fence becomes a drain."""
    lowered = slurm_gpus.run("scontrol", "update", "nodename=gpu-f-01", "gres=gpu:3", check=False)
    assert lowered.returncode == 1
    assert "Invalid generic resource (gres) specification" in lowered.stderr
    assert show(slurm_gpus, "gpu-f-01")["Gres"] == "gpu:4"


def test_slurm_fence_answers_false_and_leaves_the_node_as_it_was(slurm_gpus, gpu_cluster):
    node = NodeFactory.build(hostname="gpu-f-01.dc1.example.net", cluster=gpu_cluster)
    assert SlurmAdapter(gpu_cluster).fence_gpus(node, [2], reason="XID 79") is False
    assert show(slurm_gpus, "gpu-f-01") == {"Gres": "gpu:4", "GresDrain": "N/A", "GresUsed": "gpu:0"}


def test_slurm_fence_refuses_without_trying_while_a_job_holds_gpus(slurm_gpus, gpu_cluster, monkeypatch):
    job = slurm_gpus.run(
        "sbatch", "--parsable", "-w", "gpu-f-02", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 60"
    )
    slurm_gpus.wait_job_running(job.stdout.strip())
    adapter = SlurmAdapter(gpu_cluster)
    asked: list[tuple[str, ...]] = []
    run = adapter._run
    monkeypatch.setattr(adapter, "_run", lambda *command: asked.append(command) or run(*command))
    node = NodeFactory.build(hostname="gpu-f-02.dc1.example.net", cluster=gpu_cluster)
    assert adapter.fence_gpus(node, [3], reason="XID 79") is False
    assert [c for c in asked if c[:2] == ("scontrol", "update")] == []


def test_slurm_fence_of_a_node_without_gpus_answers_false(slurm, adapter, slurm_node):
    assert adapter.fence_gpus(slurm_node("gpu-s-01"), [0], reason="XID 79") is False
    assert adapter.unfence_gpus(slurm_node("gpu-s-02"), [0], reason="cleared") is True  # nothing of ours


def test_a_gpu_fence_slurm_cannot_take_drains_the_production_node(slurm_gpus, gpu_cluster, eager):  # noqa: F811
    job = slurm_gpus.submit("gpu-f-01", 300, "customer-train")
    slurm_gpus.wait_job_running(job)
    node = NodeFactory(hostname="gpu-f-01.dc1.example.net", cluster=gpu_cluster, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=2)
    with eager():
        services.fence_gpu(node.pk, 2, actor=ACTOR, reason="XID 79 on GPU 2")
    node.refresh_from_db()
    assert node.state == NodeState.DRAIN_PENDING
    drain = NodeEvent.objects.get(node=node, transition="request_drain")
    assert "GPU 2 fenced (XID 79 on GPU 2)" in drain.reason and "cannot fence" in drain.reason
    assert slurm_gpus.node_state("gpu-f-01") == "draining"  # the job carries on, nothing new starts

    # Cleared while the drain still waits for the job: the drain the fence caused is called off.
    with eager():
        services.clear_gpu(node.pk, 2, actor=ACTOR, reason="false alarm: the XID was the job's")
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION
    cancel = NodeEvent.objects.get(node=node, transition="cancel_drain")
    assert "GPU 2 cleared" in cancel.reason
    assert slurm_gpus.node_state("gpu-f-01") != "draining"


def test_clearing_a_gpu_leaves_someone_elses_drain_alone(gpu_cluster, eager, monkeypatch):  # noqa: F811
    monkeypatch.setattr(SlurmAdapter, "unfence_gpus", lambda *a, **k: False)
    node = NodeFactory(hostname="gpu-f-03.dc1.example.net", cluster=gpu_cluster, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=1)
    monkeypatch.setattr(SlurmAdapter, "is_running_work", lambda *a: True)
    with eager():
        services.request_drain(node.pk, actor=ACTOR, reason="operator: rack maintenance on Friday")
    GPU.objects.filter(node=node, index=1).update(health=GpuHealth.FENCED)
    with eager():
        services.clear_gpu(node.pk, 1, actor=ACTOR, reason="replaced")
    node.refresh_from_db()
    assert node.state == NodeState.DRAIN_PENDING


def test_gpu_fencing_off_drains_instead_of_asking_the_scheduler(gpu_cluster, eager, settings, monkeypatch):  # noqa: F811
    settings.NODEWARDEN_GPU_FENCING = False
    monkeypatch.setattr(SlurmAdapter, "fence_gpus", lambda *a, **k: pytest.fail("asked the scheduler to fence"))
    monkeypatch.setattr(SlurmAdapter, "is_running_work", lambda *a: True)  # the drain waits for the job
    node = NodeFactory(hostname="gpu-f-02.dc1.example.net", cluster=gpu_cluster, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=1)
    with eager():
        services.fence_gpu(node.pk, 1, actor=ACTOR, reason="XID 48")
    node.refresh_from_db()
    assert node.state == NodeState.DRAIN_PENDING
    assert "NODEWARDEN_GPU_FENCING" in NodeEvent.objects.get(node=node, transition="request_drain").reason


# --- Kubernetes ---------------------------------------------------------------------------------


@pytest.fixture
def kube_cluster(kube, settings):
    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": "t0ken"}
    return ClusterFactory.build(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)


def add_gpu_node(kube, name: str, gpus: int) -> None:
    kube.add_node(name)
    resources = {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}

    def put() -> None:
        raw = kube.emulator.objects[NODES, None, name].raw
        kube.emulator.objects[NODES, None, name] = {**raw, "status": {"capacity": resources, "allocatable": resources}}

    kube._on_loop(put)


def test_kubernetes_fence_lowers_allocatable_and_records_the_indices(kube, kube_cluster):
    add_gpu_node(kube, "gpu-k-01", 8)
    node = NodeFactory.build(hostname="gpu-k-01.east.example.net", cluster=kube_cluster)
    adapter = KubernetesAdapter(kube_cluster)
    assert adapter.fence_gpus(node, [5], reason="XID 79") is True
    assert adapter.fence_gpus(node, [2], reason="XID 48") is True
    raw = kube.node("gpu-k-01")
    assert raw["metadata"]["annotations"][FENCED_GPUS_ANNOTATION] == "2,5"
    assert raw["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    assert raw["status"]["capacity"]["nvidia.com/gpu"] == "8"

    assert adapter.unfence_gpus(node, [5], reason="replaced") is True
    raw = kube.node("gpu-k-01")
    assert raw["metadata"]["annotations"][FENCED_GPUS_ANNOTATION] == "2"
    assert raw["status"]["allocatable"]["nvidia.com/gpu"] == "7"


def kubelet_rewrites_allocatable(kube, name: str) -> None:
    """A device-plugin or kubelet restart: allocatable is the plugin's count again; annotations stay."""

    def put() -> None:
        raw = kube.emulator.objects[NODES, None, name].raw
        status = {**raw["status"], "allocatable": dict(raw["status"]["capacity"])}
        kube.emulator.objects[NODES, None, name] = {**raw, "status": status}

    kube._on_loop(put)


def test_the_drain_follower_applies_a_fence_again_after_the_kubelet_rewrote_allocatable(kube, db):
    add_gpu_node(kube, "gpu-k-03", 4)
    cluster = ClusterFactory(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)
    node = NodeFactory(hostname="gpu-k-03.east.example.net", cluster=cluster, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=1)
    GPU.objects.filter(node=node, index=1).update(health=GpuHealth.FENCED)  # as fence_gpu left it
    with override_settings(NODEWARDEN_KUBERNETES_TOKENS={"gpu-east": "t0ken"}):
        assert follow_drains()["fences"] == 1
        assert kube.node("gpu-k-03")["status"]["allocatable"]["nvidia.com/gpu"] == "3"
        kubelet_rewrites_allocatable(kube, "gpu-k-03")
        assert kube.node("gpu-k-03")["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        follow_drains()
        assert kube.node("gpu-k-03")["status"]["allocatable"]["nvidia.com/gpu"] == "3"
        writes = len(kube.requests("PATCH"))
        follow_drains()  # in place: nothing written
        assert len(kube.requests("PATCH")) == writes
    assert kube.node("gpu-k-03")["metadata"]["annotations"][FENCED_GPUS_ANNOTATION] == "1"


def test_kubernetes_node_without_gpus_cannot_be_fenced(kube, kube_cluster):
    add_gpu_node(kube, "cpu-k-01", 0)
    node = NodeFactory.build(hostname="cpu-k-01.east.example.net", cluster=kube_cluster)
    assert KubernetesAdapter(kube_cluster).fence_gpus(node, [0], reason="XID 79") is False
    assert FENCED_GPUS_ANNOTATION not in kube.node("cpu-k-01")["metadata"]["annotations"]


def test_an_unknown_scheduler_cannot_fence_and_no_scheduler_needs_nothing():
    cluster = ClusterFactory.build(scheduler_kind="nosuchkind")
    node = NodeFactory.build(cluster=cluster)
    assert UnregisteredScheduler(cluster).fence_gpus(node, [0], reason="x") is False
    # Without a scheduler nothing hands GPUs out but what Nodewarden says: the fence holds as it is.
    assert NoScheduler(None).fence_gpus(node, [0], reason="x") is True


def test_clearing_a_fenced_gpu_gives_it_back_to_the_scheduler(kube, kube_cluster, eager, db):  # noqa: F811
    add_gpu_node(kube, "gpu-k-02", 4)
    cluster = ClusterFactory(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)
    node = NodeFactory(hostname="gpu-k-02.east.example.net", cluster=cluster, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=3)
    with eager():
        services.fence_gpu(node.pk, 3, actor=ACTOR, reason="XID 79")
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION
    assert kube.node("gpu-k-02")["status"]["allocatable"]["nvidia.com/gpu"] == "3"
    with eager():
        services.clear_gpu(node.pk, 3, actor=ACTOR, reason="replaced")
    assert kube.node("gpu-k-02")["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node.gpus.get(index=3).health == GpuHealth.HEALTHY
