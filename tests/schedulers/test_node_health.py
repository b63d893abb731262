"""The node's health in its Kubernetes cluster, the way node-problem-detector shows a node's: the
``NodewardenHealthy`` condition, the labels ``nodewarden.io/state`` and ``nodewarden.io/persona``,
and Events on the Node for transitions and findings; all cleared when the node returns.

Against kmock's emulator over real HTTP (``kube_stand_in``: no kube-apiserver can run here); it
does not know the node status subresource or Events' listing by node, so the stand-in serves them.
"""

from __future__ import annotations

import json

import pytest

from health.services import raise_finding
from nodes import services
from nodes.choices import NodeState
from schedulers import conditions
from schedulers.kubernetes import CONDITION, KubernetesAdapter
from tests.factories import ClusterFactory, GPUFactory, NodeFactory, PersonaFactory
from tests.validation.conftest import eager  # noqa: F401

from .kube_stand_in import NODES, STATUS_PATH, kube_fixture  # noqa: F401  (the `kube` fixture)

ACTOR = services.Actor.system("test")
NAME = "gpu-h-01"
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}


def kubelet_posts_ready(kube, name: str = NAME) -> None:
    """The kubelet's own condition: ours must leave it as it is."""

    def put() -> None:
        raw = kube.emulator.objects[NODES, None, name].raw
        kube.emulator.objects[NODES, None, name] = {**raw, "status": {"conditions": [READY]}}

    kube._on_loop(put)


@pytest.fixture
def kube_node(kube, db, settings):
    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": "t0ken"}
    kube.add_node(NAME)
    kubelet_posts_ready(kube)
    cluster = ClusterFactory(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)
    return NodeFactory(
        hostname=f"{NAME}.east.example.net",
        cluster=cluster,
        state=NodeState.PRODUCTION,
        persona=PersonaFactory(name="llm training"),
    )


def status_writes(kube) -> list[dict]:
    return [json.loads(r.body) for r in kube.requests("PATCH", STATUS_PATH)]


# --- the adapter ------------------------------------------------------------------------------


def test_the_condition_is_written_through_the_status_subresource_beside_the_kubelets(kube, kube_node):
    adapter = KubernetesAdapter(kube_node.cluster)
    report = conditions.HealthReport(False, "DrainPending", "Drain pending: XID 79", {"nodewarden.io/state": "x"})
    adapter.report_health(kube_node, report)

    condition = kube.condition(NAME, CONDITION)
    assert condition["status"] == "False"
    assert (condition["reason"], condition["message"]) == ("DrainPending", "Drain pending: XID 79")
    assert condition["lastTransitionTime"].endswith("Z")
    assert kube.condition(NAME, "Ready") == READY
    (write,) = status_writes(kube)
    assert write["metadata"]["resourceVersion"]  # compare-and-swap against the kubelet's writes
    assert kube.node(NAME)["metadata"]["labels"]["nodewarden.io/state"] == "x"


def test_the_same_report_again_writes_nothing_and_a_flip_moves_the_transition_time(kube, kube_node):
    adapter = KubernetesAdapter(kube_node.cluster)
    down = conditions.HealthReport(False, "Triage", "Triage: XID 79")
    adapter.report_health(kube_node, down)
    adapter.report_health(kube_node, down)
    assert len(status_writes(kube)) == 1

    def backdate() -> None:  # a second clock tick without sleeping: the first write was long ago
        raw = kube.emulator.objects[NODES, None, NAME].raw
        ours = next(c for c in raw["status"]["conditions"] if c["type"] == CONDITION)
        ours["lastTransitionTime"] = "2020-01-01T00:00:00Z"
        kube.emulator.objects[NODES, None, NAME] = raw

    kube._on_loop(backdate)
    adapter.report_health(kube_node, conditions.HealthReport(False, "Remediating", "Remediating: reset"))
    assert kube.condition(NAME, CONDITION)["lastTransitionTime"] == "2020-01-01T00:00:00Z"  # still False
    adapter.report_health(kube_node, conditions.HealthReport(True, "InProduction", "back"))
    assert kube.condition(NAME, CONDITION)["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_an_event_is_posted_on_the_node(kube, kube_node):
    note = conditions.NodeEventNote("NodewardenTransition", "Production -> Drain pending: XID 79", warning=True)
    KubernetesAdapter(kube_node.cluster).report_health(kube_node, conditions.HealthReport(False, "X", "y", event=note))
    (event,) = kube.events(NAME)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": NAME}
    assert (event["reason"], event["type"], event["source"]) == (
        "NodewardenTransition",
        "Warning",
        {"component": "nodewarden"},
    )
    assert event["message"] == "Production -> Drain pending: XID 79"


# --- the lifecycle shows on the Node ------------------------------------------------------------


def test_a_drain_shows_on_the_node_and_the_return_clears_it(kube, kube_node, eager):  # noqa: F811
    kube.add_pod("trainer-0", node=NAME)  # the drain waits for the job
    with eager():
        services.request_drain(kube_node.pk, actor=ACTOR, reason="ECC errors climbing on GPU 3")
    condition = kube.condition(NAME, CONDITION)
    assert (condition["status"], condition["reason"]) == ("False", "DrainPending")
    assert "ECC errors climbing on GPU 3" in condition["message"]
    labels = kube.node(NAME)["metadata"]["labels"]
    assert labels["nodewarden.io/state"] == "drain_pending"
    assert labels["nodewarden.io/persona"] == "llm-training"
    (event,) = kube.events(NAME)
    assert event["reason"] == "NodewardenTransition" and event["type"] == "Warning"
    assert "Production -> Drain pending: ECC errors climbing on GPU 3" in event["message"]

    with eager():
        services.cancel_drain(kube_node.pk, actor=ACTOR, reason="false alarm")
    condition = kube.condition(NAME, CONDITION)
    assert (condition["status"], condition["reason"]) == ("True", "InProduction")
    assert kube.node(NAME)["metadata"]["labels"]["nodewarden.io/state"] == "production"
    assert [e["type"] for e in kube.events(NAME)] == ["Warning", "Normal"]
    assert kube.condition(NAME, "Ready") == READY


def test_a_catastrophic_finding_shows_as_the_condition_and_an_event(kube, kube_node, eager):  # noqa: F811
    with eager():
        raise_finding(kube_node.pk, rule="xid", severity="catastrophic", summary="XID 79: GPU has fallen off the bus")
    events = kube.events(NAME)
    finding = next(e for e in events if e["reason"] == "NodewardenFinding")
    assert "XID 79: GPU has fallen off the bus" in finding["message"] and finding["type"] == "Warning"
    condition = kube.condition(NAME, CONDITION)
    assert condition["status"] == "False"
    assert "XID 79: GPU has fallen off the bus" in condition["message"]


def test_a_slurm_cluster_gets_no_report(db):
    from schedulers.reactions import report_health

    node = NodeFactory(cluster=ClusterFactory(scheduler_kind="slurm"), state=NodeState.TRIAGE)
    assert report_health(node.pk) == ""


def test_the_condition_names_the_finding_while_the_node_serves_on(db):
    node = NodeFactory(state=NodeState.PRODUCTION)
    raise_finding(node.pk, rule="gpu-thermal", severity="degraded", summary="GPU 2 at 91 C")
    report = conditions.health_report(node)
    assert (report.healthy, report.reason, report.message) == (False, "GpuThermal", "GPU 2 at 91 C")
    raise_finding(node.pk, rule="fan-noise", severity="warning", summary="fan 3 loud")
    assert conditions.health_report(node).reason == "GpuThermal"  # a warning is not serious
    other = NodeFactory(state=NodeState.PRODUCTION)
    assert conditions.health_report(other).healthy is True


# --- actions show on the Node too (nodes.followups.on_action) ------------------------------------


def action_events(kube) -> list[dict]:
    return [e for e in kube.events(NAME) if e["reason"] == conditions.ACTION_EVENT]


def test_an_agent_command_sent_to_the_node_is_an_event_on_it(kube, kube_node, eager):  # noqa: F811
    from telemetry.commands import issue_command

    with eager():
        command = issue_command(kube_node.pk, "reset_gpu", args={"gpu": 3}, actor=ACTOR, reason="XID 94 on GPU 3")
    (event,) = action_events(kube)
    assert event["type"] == "Normal"
    assert event["message"] == f"Agent command reset_gpu (gpu 3) #{command.pk} issued: XID 94 on GPU 3"
    assert kube.condition(NAME, CONDITION)["status"] == "True"  # an action alone changes no health


def test_a_fenced_gpu_is_a_warning_event_and_its_clearing_a_normal_one(kube, kube_node, eager):  # noqa: F811
    GPUFactory(node=kube_node, index=3)
    with eager():
        services.fence_gpu(kube_node.pk, 3, actor=ACTOR, reason="row remap failure")
    with eager():
        services.clear_gpu(kube_node.pk, 3, actor=ACTOR, reason="replaced")
    # Kubernetes cannot fence one GPU: the node was drained instead, and given back (own events).
    fenced, cleared = (e for e in action_events(kube) if e["message"].startswith("GPU 3 "))
    assert (fenced["type"], fenced["message"]) == ("Warning", "GPU 3 fenced: row remap failure")
    assert (cleared["type"], cleared["message"]) == ("Normal", "GPU 3 healthy: replaced")


def test_a_remediation_rungs_outcome_is_an_event_beside_the_transitions(kube, kube_node, eager):  # noqa: F811
    # Alone in its cluster the node may not leave (blast radius): ten more in production.
    NodeFactory.create_batch(10, cluster=kube_node.cluster, site=kube_node.cluster.site, state=NodeState.PRODUCTION)
    with eager():
        raise_finding(kube_node.pk, rule="xid", severity="catastrophic", summary="XID 79: GPU has fallen off the bus")
    messages = [e["message"] for e in action_events(kube)]
    assert any(m.startswith("Remediation: reboot failed: no BMC configured") for m in messages), messages
    transitions = [e["message"] for e in kube.events(NAME) if e["reason"] == conditions.TRANSITION_EVENT]
    assert any(m.startswith("Triage -> Remediation in progress: Reboot") for m in transitions), transitions
