"""The demo's workload schedulers: one real Slurm cluster holding the demo's Slurm nodes (a few
with a slurmd, the rest without), a Kubernetes stand-in for its Kubernetes cluster; the demo
clusters point at them, and drains and cordons through the adapters land there."""

from __future__ import annotations

import io
import re
import shlex
import subprocess

import pytest
from django.core.management import call_command

from fleet.choices import SchedulerKind
from fleet.models import Cluster
from nodes import services
from nodes.choices import NodeState
from nodewarden.celery import app as celery_app
from sandbox.demo import demo_nodes, submit_demo_jobs
from sandbox.demo.schedulers import running_demo_schedulers, short_name
from schedulers.base import OWNER, SchedulerError, adapter_for
from tests.schedulers.conftest import require_slurm

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def seeded(settings):
    """A small seeded demo fleet (its clusters still point at made-up scheduler addresses)."""
    require_slurm()
    settings.NODEWARDEN_DEMO_CHURN = True
    call_command("seed_demo", "--nodes", "40", "--days", "30", "--seed", "7", stdout=io.StringIO())


@pytest.fixture
def demo(seeded, settings):
    """The demo's schedulers running, and the adapters' token set."""
    with running_demo_schedulers() as running:
        settings.NODEWARDEN_KUBERNETES_TOKENS = running.tokens  # what bin/demo gives the worker
        yield running


def cluster(kind: str) -> Cluster:
    return Cluster.objects.filter(scheduler_kind=kind, nodes__in=demo_nodes()).distinct().order_by("name").first()


def node_in(kind: str, *, state: str = S.PRODUCTION, name_in=None):
    nodes = (
        demo_nodes().filter(cluster__scheduler_kind=kind, state=state).select_related("cluster").order_by("hostname")
    )
    return next(n for n in nodes if name_in is None or short_name(n.hostname) in name_in)


def test_the_slurm_clusters_point_at_the_real_cluster_which_knows_every_demo_node(demo):
    conf = str(demo.slurm.conf_path)
    slurm_clusters = Cluster.objects.filter(scheduler_kind=SchedulerKind.SLURM, site__slug__in=("iad1", "fra1"))
    assert slurm_clusters.count() == 2
    assert set(slurm_clusters.values_list("scheduler_endpoint", flat=True)) == {conf}
    # Three production nodes of each Slurm cluster run a real slurmd.
    assert len(demo.slurmd_nodes) == 6
    for hostname in demo_nodes().filter(cluster__in=slurm_clusters).values_list("hostname", flat=True):
        out = demo.slurm.run("scontrol", "show", "node", short_name(hostname)).stdout
        assert f"NodeName={short_name(hostname)} " in out
    assert demo.slurm.node_state(demo.slurmd_nodes[0]) == "idle"
    assert demo.slurm.node_state(demo.cloud_nodes[0]) in ("idle~", "drained~")


def test_a_drain_through_the_adapter_shows_in_slurm_and_lifts_again(demo):
    node = node_in(SchedulerKind.SLURM, name_in=demo.cloud_nodes)
    name = short_name(node.hostname)
    adapter = adapter_for(node.cluster)

    adapter.drain(node, reason="XID 79 on GPU 3")

    assert demo.slurm.node_state(name) == "drained~"
    assert "Reason=nodewarden: XID 79 on GPU 3 [root@" in demo.slurm.run("scontrol", "show", "node", name).stdout
    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.owner) == (True, True, OWNER)
    adapter.uncordon(node, reason="remediation done")  # rc 0 for a node without a slurmd
    assert demo.slurm.node_state(name) == "idle~"


def test_nodes_nodewarden_has_out_of_production_start_drained_or_cordoned(seeded, settings):
    # Drains requested before the schedulers ran (their follow-ups never reached one).
    slurm_node, kube_node = node_in(SchedulerKind.SLURM), node_in(SchedulerKind.KUBERNETES)
    for node in (slurm_node, kube_node):
        services.request_drain(node.pk, actor=services.Actor.system("test"), reason="XID 94 on GPU 2")

    with running_demo_schedulers() as demo:
        assert demo.synced >= 2
        out = demo.slurm.run("scontrol", "show", "node", short_name(slurm_node.hostname)).stdout
        assert "Reason=nodewarden: Drain pending: when the demo started" in out
        stored = demo.kube.node(short_name(kube_node.hostname))
        assert stored["spec"]["unschedulable"] is True
        assert stored["metadata"]["annotations"]["nodewarden.io/cordon-reason"] == (
            "Drain pending: when the demo started"
        )


def test_a_requested_drain_waits_for_the_demo_job_on_a_slurmd_node(
    demo, django_capture_on_commit_callbacks, monkeypatch
):
    # The demo's job model (sandbox.demo.telemetry) says every node is busy for the whole slot here;
    # which nodes are idle at the wall-clock time is not this test's subject.
    monkeypatch.setattr("sandbox.demo.telemetry.node_has_job", lambda hostname, now: True)
    monkeypatch.setattr("sandbox.demo.telemetry.job_seconds_left", lambda hostname, now: 600)
    summary = submit_demo_jobs(seed=1)
    assert summary.startswith("6 jobs submitted"), summary
    node = node_in(SchedulerKind.SLURM, name_in=demo.slurmd_nodes)
    name = short_name(node.hostname)
    job = re.search(rf"job (\d+) on {name} ", summary)[1]
    demo.slurm.wait_job_running(job)
    celery_app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.request_drain(node.pk, actor=services.Actor.system("test"), reason="XID 94 on GPU 2")
    finally:
        celery_app.conf.task_always_eager = False

    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING  # the customer's job still runs
    assert demo.slurm.node_state(name) == "draining" and demo.slurm.job_state(job) == "R"
    assert submit_demo_jobs(seed=2) == "0 jobs submitted"  # no new job on a busy or draining node


def test_the_kubernetes_cluster_cordons_a_demo_node_in_the_stand_in(demo):
    node = node_in(SchedulerKind.KUBERNETES)
    kube = node.cluster
    assert kube.scheduler_endpoint == demo.kube.url and set(demo.tokens) == {kube.name}

    adapter_for(kube).cordon(node, reason="XID 79 on GPU 5")

    stored = demo.kube.node(short_name(node.hostname))
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"]["nodewarden.io/cordoned-by"] == OWNER
    assert adapter_for(kube).drain_state(node).drained


def test_the_stand_in_refuses_a_wrong_token_and_the_ready_file_carries_the_right_one(demo, settings):
    node = node_in(SchedulerKind.KUBERNETES)
    settings.NODEWARDEN_KUBERNETES_TOKENS = {node.cluster.name: "not-the-token"}
    with pytest.raises(SchedulerError, match="HTTP 401 Unauthorized"):
        adapter_for(node.cluster).cordon(node, reason="maintenance")
    # The ready file's export line, as bin/demo's shell reads it.
    exported = subprocess.run(
        ["bash", "-c", demo.env_exports() + 'printf %s "$NODEWARDEN_KUBERNETES_TOKENS"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert node.cluster.name in exported and demo.kube.token in exported
    assert shlex.split(demo.env_exports())[0] == "export"
