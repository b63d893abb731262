"""The Kubernetes adapter against a stand-in API server, over real HTTP with the official client.

The stand-in is kmock's KubernetesEmulator (tests/schedulers/kube_stand_in.py), because no
kube-apiserver can run here. Where kmock answers otherwise than a real API server, the tests serve
the real server's recorded answers (``RECORDED``) instead:
- evictions: kmock has no eviction subresource or PodDisruptionBudgets; a reaction deletes the
  pod and answers the real ``201 Status``, or the real 429 where the test's "PDB" says no;
- a missing node (real 404 body: ``nodes "x" not found``), RBAC (403), a stale write (409);
- kmock ignores ``fieldSelector``, so pods of other nodes are in every list it answers.
"""

from __future__ import annotations

import json
import re
import socket

import pytest

from schedulers.base import OWNER, SchedulerConflict, SchedulerError, adapter_for
from schedulers.kubernetes import (
    OWNER_ANNOTATION,
    REASON_ANNOTATION,
    TAINT_KEY,
    KubernetesAdapter,
)
from tests.factories import ClusterFactory, NodeFactory

from .kube_stand_in import EVICTION_PATH, RECORDED, kube_fixture  # noqa: F401  (the `kube` fixture)

TOKEN = "t0ken-for-gpu-east"
NODE = "gpu-node-01"
OTHER_NODE = "gpu-node-02"


@pytest.fixture
def cluster(kube, settings):
    settings.NODEWARDEN_KUBERNETES_TOKENS = {"gpu-east": TOKEN}
    return ClusterFactory.build(name="gpu-east", scheduler_kind="kubernetes", scheduler_endpoint=kube.url)


@pytest.fixture
def node(cluster, kube):
    kube.add_node(NODE)
    kube.add_node(OTHER_NODE)
    return NodeFactory.build(hostname=f"{NODE}.east.example.net", cluster=cluster)


@pytest.fixture
def adapter(cluster):
    return adapter_for(cluster)


def patches(kube, name=NODE):
    return [json.loads(r.body) for r in kube.requests("PATCH", f"/api/v1/nodes/{name}")]


def evictions(kube):
    return kube.requests("POST", EVICTION_PATH)


# --- the client and its credentials -------------------------------------------------------


def test_adapter_for_a_kubernetes_cluster_is_the_kubernetes_adapter(adapter, node):
    assert isinstance(adapter, KubernetesAdapter)
    assert adapter.node_name(node) == NODE


def test_it_sends_the_clusters_bearer_token_and_a_json_merge_patch(adapter, node, kube):
    adapter.cordon(node, reason="firmware update")

    (patch,) = kube.requests("PATCH")
    assert patch.headers["Authorization"] == f"Bearer {TOKEN}"
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    # compare-and-swap: the write names the version it was computed from
    assert json.loads(patch.body)["metadata"]["resourceVersion"] == "1"


def test_it_refuses_to_call_without_a_token(adapter, node, settings):
    settings.NODEWARDEN_KUBERNETES_TOKENS = {}

    with pytest.raises(SchedulerError, match="no bearer token for Kubernetes cluster gpu-east"):
        adapter.cordon(node, reason="firmware update")


def test_an_unreachable_api_server_is_a_scheduler_error(node, settings):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node.cluster.scheduler_endpoint = f"http://127.0.0.1:{port}"

    with pytest.raises(SchedulerError, match=r"read_node for node gpu-node-01: cluster gpu-east .* did not answer"):
        KubernetesAdapter(node.cluster).drain_state(node)


# --- cordon -------------------------------------------------------------------------------


def test_cordon_sets_unschedulable_our_taint_and_owner(adapter, node, kube):
    adapter.cordon(node, reason="RMA: GPU 3 fell off the bus (Xid 79)")

    state = kube.node(NODE)
    assert state["spec"]["unschedulable"] is True
    assert state["spec"]["taints"] == [
        {"key": TAINT_KEY, "value": "RMA-GPU-3-fell-off-the-bus-Xid-79", "effect": "NoSchedule"}
    ]
    assert state["metadata"]["annotations"] == {
        OWNER_ANNOTATION: OWNER,
        REASON_ANNOTATION: "RMA: GPU 3 fell off the bus (Xid 79)",
    }
    assert adapter.drain_state(node).owner == OWNER


def test_cordon_keeps_the_nodes_other_taints(adapter, node, kube):
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    kube.add_node(NODE, taints=[gpu_taint])

    adapter.cordon(node, reason="maintenance")

    # a merge patch replaces the whole list: the adapter must send the others back
    assert kube.node(NODE)["spec"]["taints"] == [
        gpu_taint,
        {"key": TAINT_KEY, "value": "maintenance", "effect": "NoSchedule"},
    ]


def test_a_long_reason_makes_a_valid_taint_value(adapter, node, kube):
    adapter.cordon(node, reason="-- " + "x" * 100)

    value = kube.node(NODE)["spec"]["taints"][0]["value"]
    assert len(value) <= 63
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value)


def test_cordon_again_for_the_same_reason_writes_nothing(adapter, node, kube):
    adapter.cordon(node, reason="maintenance")
    adapter.cordon(node, reason="maintenance")

    assert len(patches(kube)) == 1


def test_cordon_leaves_someone_elses_cordon_as_it_is(adapter, node, kube):
    kube.add_node(NODE, unschedulable=True)

    adapter.cordon(node, reason="maintenance")

    assert patches(kube) == []
    assert kube.node(NODE)["metadata"]["annotations"] == {}
    state = adapter.drain_state(node)
    assert (state.cordoned, state.owner) == (True, "someone else")


def test_a_stale_write_is_retried_on_a_fresh_read(adapter, node, kube):
    kube.answer("PATCH", f"/api/v1/nodes/{NODE}", RECORDED.conflict("nodes", NODE), times=1)

    adapter.cordon(node, reason="maintenance")

    # kmock applied the first patch although it answered 409 (no preconditions there), so the
    # retry re-reads a cordoned node; a real server would have stored nothing and got a 2nd patch.
    assert len(kube.requests("GET", f"/api/v1/nodes/{NODE}")) == 2
    assert kube.node(NODE)["spec"]["unschedulable"] is True


# --- drain --------------------------------------------------------------------------------


def test_drain_is_not_drained_until_the_running_pod_is_gone(adapter, node, kube):
    kube.add_pod("trainer-0", node=NODE)

    adapter.drain(node, reason="kernel update")

    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.running_jobs) == (True, False, 1)
    assert "1 pod(s) left: ml/trainer-0" in state.detail
    assert adapter.is_running_work(node)
    assert evictions(kube) == []  # drain lets current work finish

    kube.end_pod("trainer-0")  # the job ended

    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.running_jobs) == (True, True, 0)
    assert not adapter.is_running_work(node)


def test_daemonset_mirror_and_finished_pods_are_not_work(adapter, node, kube):
    kube.add_pod("dcgm-exporter-x7k2p", node=NODE, namespace="monitoring", owner_kind="DaemonSet")
    kube.add_pod("kube-proxy-gpu-node-01", node=NODE, namespace="kube-system", owner_kind=None, mirror=True)
    kube.add_pod("eval-done", node=NODE, phase="Succeeded")
    kube.add_pod("eval-crashed", node=NODE, phase="Failed")
    kube.add_pod("trainer-elsewhere", node=OTHER_NODE)  # kmock ignores the field selector

    adapter.drain(node, reason="kernel update")

    state = adapter.drain_state(node)
    assert (state.drained, state.running_jobs) == (True, 0)
    assert not adapter.is_running_work(node)


def test_a_bare_pod_without_owner_is_work(adapter, node, kube):
    kube.add_pod("notebook", node=NODE, owner_kind=None)

    assert adapter.is_running_work(node)


# --- evict --------------------------------------------------------------------------------


def test_evict_evicts_the_work_pods_and_the_node_drains(adapter, node, kube):
    kube.add_pod("trainer-0", node=NODE)
    kube.add_pod("trainer-1", node=NODE)
    kube.add_pod("dcgm-exporter-x7k2p", node=NODE, namespace="monitoring", owner_kind="DaemonSet")

    adapter.evict(node, reason="GPU fell off the bus")

    assert [r.url.path for r in evictions(kube)] == [
        "/api/v1/namespaces/ml/pods/trainer-0/eviction",
        "/api/v1/namespaces/ml/pods/trainer-1/eviction",
    ]
    assert json.loads(evictions(kube)[0].body) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "trainer-0", "namespace": "ml"},
    }
    assert kube.has_pod("dcgm-exporter-x7k2p", namespace="monitoring")
    state = adapter.drain_state(node)
    assert (state.cordoned, state.drained, state.owner) == (True, True, OWNER)


def test_evict_reports_a_pdb_refusal_and_leaves_the_pod(adapter, node, kube):
    kube.add_pod("trainer-0", node=NODE)
    kube.add_pod("trainer-1", node=NODE)
    kube.pdb_refuses("trainer-0")

    adapter.evict(node, reason="GPU fell off the bus")  # no error: the caller retries later

    assert kube.has_pod("trainer-0")
    assert not kube.has_pod("trainer-1")
    state = adapter.drain_state(node)
    assert (state.drained, state.running_jobs) == (False, 1)
    assert "eviction refused by a PodDisruptionBudget: ml/trainer-0: TooManyRequests" in state.detail
    assert "The disruption budget trainer-pdb needs 2 healthy pods and has 2 currently" in state.detail


def test_evict_again_once_the_pdb_allows_it(adapter, node, kube):
    kube.add_pod("trainer-0", node=NODE)
    kube.pdb_refuses("trainer-0")
    adapter.evict(node, reason="GPU fell off the bus")

    kube.refusing.clear()
    adapter.evict(node, reason="GPU fell off the bus")

    state = adapter.drain_state(node)
    assert state.drained
    assert "PodDisruptionBudget" not in state.detail


def test_evict_fails_on_any_other_refusal(adapter, node, kube):
    kube.add_pod("trainer-0", node=NODE)
    kube.answer("POST", "/api/v1/namespaces/ml/pods/trainer-0/eviction", RECORDED.several_pdbs())

    with pytest.raises(
        SchedulerError,
        match=(
            r"create_namespaced_pod_eviction for node gpu-node-01 \(pod ml/trainer-0\) in cluster gpu-east: "
            r"HTTP 500 This pod has more than one PodDisruptionBudget"
        ),
    ):
        adapter.evict(node, reason="GPU fell off the bus")


# --- uncordon -----------------------------------------------------------------------------


def test_uncordon_lifts_our_cordon_and_keeps_other_taints(adapter, node, kube):
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    kube.add_node(NODE, taints=[gpu_taint], annotations={"team": "ml-infra"})
    adapter.cordon(node, reason="maintenance")

    adapter.uncordon(node, reason="repaired")

    state = kube.node(NODE)
    assert state["spec"]["unschedulable"] is False
    assert state["spec"]["taints"] == [gpu_taint]
    assert state["metadata"]["annotations"] == {"team": "ml-infra"}
    assert adapter.drain_state(node).cordoned is False


def test_uncordon_refuses_a_cordon_owned_by_another_tool(adapter, node, kube):
    kube.add_node(NODE, unschedulable=True, annotations={OWNER_ANNOTATION: "kured"})

    with pytest.raises(
        SchedulerConflict, match=r"gpu-node-01 .* is cordoned by kured \(nodewarden.io/cordoned-by=kured\)"
    ):
        adapter.uncordon(node, reason="repaired")

    assert patches(kube) == []
    assert adapter.drain_state(node).owner == "kured"


def test_uncordon_refuses_a_cordon_that_names_no_owner(adapter, node, kube):
    kube.add_node(NODE, unschedulable=True)

    with pytest.raises(SchedulerConflict, match="cordoned by someone else"):
        adapter.uncordon(node, reason="repaired")

    assert kube.node(NODE)["spec"]["unschedulable"] is True


def test_uncordon_of_a_schedulable_node_does_nothing(adapter, node, kube):
    adapter.uncordon(node, reason="repaired")

    assert patches(kube) == []


# --- errors -------------------------------------------------------------------------------


def test_an_unknown_node_is_a_clear_error(adapter, cluster, kube):
    ghost = NodeFactory.build(hostname="gpu-node-99.east.example.net", cluster=cluster)

    for verb in (adapter.drain_state, adapter.is_running_work):
        with pytest.raises(SchedulerError, match="no node gpu-node-99 in Kubernetes cluster gpu-east"):
            verb(ghost)
    with pytest.raises(SchedulerError, match="no node gpu-node-99 in Kubernetes cluster gpu-east"):
        adapter.cordon(ghost, reason="maintenance")


def test_an_unknown_node_quotes_a_real_servers_answer(adapter, cluster, kube):
    kube.answer("GET", "/api/v1/nodes/gpu-node-99", RECORDED.not_found("nodes", "gpu-node-99"))
    ghost = NodeFactory.build(hostname="gpu-node-99", cluster=cluster)

    with pytest.raises(SchedulerError) as raised:
        adapter.drain_state(ghost)

    assert str(raised.value) == (
        'no node gpu-node-99 in Kubernetes cluster gpu-east (read_node: NotFound nodes "gpu-node-99" not found)'
    )


def test_a_forbidden_write_names_the_call_the_node_and_the_answer(adapter, node, kube):
    user = "system:serviceaccount:ops:nodewarden"
    kube.answer("PATCH", f"/api/v1/nodes/{NODE}", RECORDED.forbidden("patch", "nodes", NODE, user))

    with pytest.raises(SchedulerError) as raised:
        adapter.cordon(node, reason="maintenance")

    assert str(raised.value) == (
        "Kubernetes patch_node for node gpu-node-01 in cluster gpu-east: HTTP 403 Forbidden "
        f'nodes "gpu-node-01" is forbidden: User "{user}" cannot patch resource "nodes" '
        'in API group "" at the cluster scope'
    )
    assert raised.value.status == 403


def test_many_nodes_are_cordoned_over_one_client_each_with_its_reason_and_a_missing_one_fails_alone(
    adapter, cluster, kube
):
    names = [f"gpu-node-{i:02d}" for i in range(10, 16)]
    for name in names:
        kube.add_node(name)
    nodes = [
        NodeFactory.build(id=100 + i, hostname=f"{name}.east.example.net", cluster=cluster)
        for i, name in enumerate(names)
    ]
    ghost = NodeFactory.build(id=99, hostname="gpu-node-99.east.example.net", cluster=cluster)
    outcome = adapter.apply_many("cordon", [(node, f"Triage: XID 79 on {node.hostname}") for node in [*nodes, ghost]])
    assert isinstance(outcome.pop(ghost.pk), SchedulerError)
    assert outcome == {node.pk: None for node in nodes}
    for node, name in zip(nodes, names, strict=True):
        state = kube.node(name)
        assert state["spec"]["unschedulable"] is True
        assert state["metadata"]["annotations"][REASON_ANNOTATION] == f"Triage: XID 79 on {node.hostname}"
    assert adapter._api is not None  # the one client the batch shared
