"""A GPU's own health: the verbs that change it, their history rows, and where it is shown."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django_fsm import TransitionNotAllowed
from rest_framework.test import APIClient

from nodes import services
from nodes.choices import EventKind, GpuHealth, NodeState
from nodes.models import GPU, NodeEvent
from nodewarden.errors import ReasonRequired, TransitionForbidden
from tests.factories import GPUFactory, NodeFactory

S, H = NodeState, GpuHealth
pytestmark = pytest.mark.django_db
SYSTEM = services.Actor.system("test")


@pytest.fixture
def node():
    node = NodeFactory(hostname="gpu-h01", state=S.PRODUCTION)
    for i in range(4):
        GPUFactory(node=node, index=i, uuid=f"GPU-h01-{i}")
    return node


def _health(node) -> dict[int, str]:
    return dict(GPU.objects.filter(node=node).values_list("index", "health"))


def test_fencing_one_gpu_records_who_why_and_which_gpu_and_leaves_the_node_in_production(node, operator):
    event = services.fence_gpu(node.pk, 2, actor=services.Actor(user=operator), reason="XID 79 twice this week")

    node.refresh_from_db()
    gpu = GPU.objects.get(node=node, index=2)
    assert node.state == S.PRODUCTION
    assert (gpu.health, gpu.health_reason) == (H.FENCED, "XID 79 twice this week")
    assert gpu.health_changed_at == event.created
    assert (event.kind, event.transition, event.actor, event.actor_name) == (
        EventKind.GPU,
        "fence_gpu",
        operator,
        "operator",
    )
    assert (event.source_state, event.target_state) == (S.PRODUCTION, "")
    assert event.details == {"gpu_index": 2, "gpu_uuid": "GPU-h01-2", "from": H.HEALTHY, "to": H.FENCED}
    assert _health(node) == {0: H.HEALTHY, 1: H.HEALTHY, 2: H.FENCED, 3: H.HEALTHY}


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_fencing_needs_a_reason_and_writes_nothing_without_one(node, operator, reason):
    with pytest.raises(ReasonRequired):
        services.fence_gpu(node.pk, 1, actor=services.Actor(user=operator), reason=reason)
    assert _health(node)[1] == H.HEALTHY and not NodeEvent.objects.filter(kind=EventKind.GPU).exists()


def test_a_viewer_may_not_fence_a_gpu(node, viewer):
    with pytest.raises(TransitionForbidden):
        services.fence_gpu(node.pk, 1, actor=services.Actor(user=viewer), reason="looks odd")
    assert _health(node)[1] == H.HEALTHY


def test_suspicion_is_written_once_and_never_unfences(node):
    first = services.mark_gpu_suspect(node.pk, 0, actor=SYSTEM, reason="XID 48", details={"finding": 7})
    again = services.mark_gpu_suspect(node.pk, 0, actor=SYSTEM, reason="XID 48 again")
    services.fence_gpu(node.pk, 1, actor=SYSTEM, reason="operator says so")
    on_fenced = services.mark_gpu_suspect(node.pk, 1, actor=SYSTEM, reason="XID 48")

    assert first is not None and first.details["finding"] == 7 and first.details["to"] == H.SUSPECT
    assert again is None and on_fenced is None
    assert _health(node) == {0: H.SUSPECT, 1: H.FENCED, 2: H.HEALTHY, 3: H.HEALTHY}
    assert NodeEvent.objects.filter(kind=EventKind.GPU).count() == 2


def test_clearing_returns_a_gpu_to_healthy_and_refuses_a_healthy_one(node):
    services.fence_gpu(node.pk, 3, actor=SYSTEM, reason="reseat pending")
    event = services.clear_gpu(node.pk, 3, actor=SYSTEM, reason="reseated, passed dcgm diag")
    with pytest.raises(TransitionNotAllowed, match="healthy"):
        services.clear_gpu(node.pk, 3, actor=SYSTEM, reason="again")
    with pytest.raises(GPU.DoesNotExist):
        services.fence_gpu(node.pk, 9, actor=SYSTEM, reason="no such GPU")

    assert (event.details["from"], event.details["to"]) == (H.FENCED, H.HEALTHY)
    assert _health(node)[3] == H.HEALTHY
    assert list(NodeEvent.objects.filter(kind=EventKind.GPU).order_by("id").values_list("transition", flat=True)) == [
        "fence_gpu",
        "clear_gpu",
    ]


def test_gpu_history_is_append_only(node):
    event = services.fence_gpu(node.pk, 0, actor=SYSTEM, reason="x")
    with pytest.raises(PermissionError):
        event.delete()


def test_passing_revalidation_back_to_production_clears_suspects_but_not_fenced_gpus(node):
    other = NodeFactory(state=S.PRODUCTION)
    GPUFactory(node=other, index=0, uuid="GPU-other-0")
    services.mark_gpu_suspect(other.pk, 0, actor=SYSTEM, reason="XID 94")
    services.mark_gpu_suspect(node.pk, 0, actor=SYSTEM, reason="XID 94")
    services.fence_gpu(node.pk, 1, actor=SYSTEM, reason="fallen off the bus")
    services.cordon(node.pk, actor=SYSTEM, reason="XID 94")
    services.revalidate(node.pk, actor=SYSTEM, reason="after reset")
    for verb in ("pass_firmware", "pass_inventory_check", "pass_burn_in", "pass_fabric_check"):
        services.VERBS[verb](node.pk, actor=SYSTEM, reason="ok")

    services.release_to_production(node.pk, actor=SYSTEM, reason="soak passed")

    assert _health(node) == {0: H.HEALTHY, 1: H.FENCED, 2: H.HEALTHY, 3: H.HEALTHY}
    assert _health(other) == {0: H.SUSPECT}  # another node's suspicion is its own
    cleared = NodeEvent.objects.filter(node=node, kind=EventKind.GPU, transition="clear_gpu").get()
    assert cleared.details["gpu_index"] == 0 and cleared.reason == "Passed validation: soak passed"


def test_the_api_shows_each_gpus_health_and_the_usable_count(node, viewer):
    services.fence_gpu(node.pk, 2, actor=SYSTEM, reason="ECC storm")
    services.mark_gpu_suspect(node.pk, 0, actor=SYSTEM, reason="XID 48")
    client = APIClient()
    client.force_authenticate(viewer)

    row = client.get(f"/api/nodes/{node.pk}/").json()

    assert row["state"] == S.PRODUCTION and row["usable_gpu_count"] == 3
    assert [(g["index"], g["health"]) for g in row["gpus"]] == [
        (0, "suspect"),
        (1, "healthy"),
        (2, "fenced"),
        (3, "healthy"),
    ]
    assert row["gpus"][2]["health_reason"] == "ECC storm" and row["gpus"][2]["health_label"] == "Fenced"
    assert row["gpus"][1]["health_changed_at"] is None
    assert client.get("/api/nodes/").json()["results"][0]["usable_gpu_count"] == 3


def test_the_node_page_shows_each_gpus_state_since_and_why(client, operator, node):
    services.fence_gpu(node.pk, 2, actor=SYSTEM, reason="ECC storm on GPU 2")
    client.force_login(operator)

    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()

    assert 'data-gpu-health="fenced"' in html and html.count('data-gpu-health="healthy"') == 3
    assert "ECC storm on GPU 2" in html
    assert "Usable GPUs: <strong>3</strong> of 4" in html


def test_a_customer_sees_gpu_states_and_usable_count_of_its_own_nodes_only(client, customer, tenant, other_tenant):
    mine = NodeFactory(tenant=tenant, state=S.PRODUCTION)
    theirs = NodeFactory(tenant=other_tenant, state=S.PRODUCTION)
    for node in (mine, theirs):
        for i in range(2):
            GPUFactory(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}")
        services.fence_gpu(node.pk, 1, actor=SYSTEM, reason=f"fenced on {node.hostname}")
    client.force_login(customer)
    api = APIClient()
    api.force_authenticate(customer)

    page = client.get(reverse("node-detail", args=[mine.pk])).content.decode()
    rows = api.get("/api/nodes/").json()["results"]

    assert 'data-gpu-health="fenced"' in page and "Usable GPUs: <strong>1</strong> of 2" in page
    assert [(r["hostname"], r["usable_gpu_count"]) for r in rows] == [(mine.hostname, 1)]
    assert [g["health"] for g in rows[0]["gpus"]] == ["healthy", "fenced"]
    assert client.get(reverse("node-detail", args=[theirs.pk])).status_code == 404
    assert api.get(f"/api/nodes/{theirs.pk}/").status_code == 404
