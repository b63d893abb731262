"""Operators fence and clear one GPU: the API's named actions and the node page's buttons.

The node's cluster has no workload scheduler here (its fence needs nothing of one); the scheduler
side is tests/schedulers/test_gpu_fencing.py."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from nodes.choices import GpuHealth, NodeState
from nodes.models import GPU, NodeEvent
from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db
H = GpuHealth


@pytest.fixture
def node(tenant):
    node = NodeFactory(hostname="gpu-f01", state=NodeState.PRODUCTION, tenant=tenant)
    for i in range(4):
        GPUFactory(node=node, index=i, uuid=f"GPU-f01-{i}")
    return node


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def url(node, index, verb) -> str:
    return f"/api/nodes/{node.pk}/gpus/{index}/{verb}/"


def test_an_operator_fences_and_clears_a_gpu_through_the_api(node, operator):
    api = api_as(operator)
    fenced = api.post(url(node, 2, "fence"), {"reason": "XID 79 on GPU 2"}, format="json", HTTP_X_REQUEST_ID="req-7")
    assert fenced.status_code == 201, fenced.content
    body = fenced.json()
    assert (body["gpu"]["index"], body["gpu"]["health"], body["usable_gpu_count"]) == (2, "fenced", 3)
    assert body["event"]["actor_name"] == "operator" and body["event"]["reason"] == "XID 79 on GPU 2"
    assert NodeEvent.objects.get(pk=body["event"]["id"]).correlation_id == "req-7"
    assert api.post(url(node, 2, "fence"), {"reason": "again"}, format="json").status_code == 409

    cleared = api.post(url(node, 2, "clear"), {"reason": "GPU replaced"}, format="json")
    assert cleared.status_code == 201 and cleared.json()["usable_gpu_count"] == 4
    assert GPU.objects.get(node=node, index=2).health == H.HEALTHY
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION


@pytest.mark.parametrize(
    ("index", "body", "status"),
    [
        ("7", {"reason": "no such GPU"}, 404),
        ("99999999999999999999", {"reason": "huge"}, 404),
        ("-1", {"reason": "negative"}, 404),
        ("x", {"reason": "not a number"}, 404),
        ("1", {}, 400),
        ("1", {"reason": "   "}, 400),
        ("1", {"reason": "nul\x00"}, 400),
    ],
)
def test_bad_gpu_actions_get_a_clear_4xx_and_write_nothing(node, operator, index, body, status):
    answer = api_as(operator).post(f"/api/nodes/{node.pk}/gpus/{index}/fence/", body, format="json")
    assert answer.status_code == status, answer.content
    assert not GPU.objects.filter(node=node, health=H.FENCED).exists()


def test_customers_and_viewers_may_not_fence(node, customer, viewer, other_tenant):
    assert api_as(customer).post(url(node, 1, "fence"), {"reason": "mine"}, format="json").status_code == 403
    theirs = NodeFactory(tenant=other_tenant)
    GPUFactory(node=theirs, index=0)
    assert api_as(customer).post(url(theirs, 0, "fence"), {"reason": "theirs"}, format="json").status_code == 404
    assert api_as(viewer).post(url(node, 1, "fence"), {"reason": "look"}, format="json").status_code == 403
    assert not GPU.objects.filter(health=H.FENCED).exists()


def test_the_node_page_has_fence_and_clear_forms_for_operators_only(client, node, operator, customer):
    client.force_login(operator)
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert page.count('data-gpu-action="fence"') == 4 and "csrfmiddlewaretoken" in page

    answer = client.post(reverse("node-gpu-action", args=[node.pk, 1, "fence"]), {"reason": "XID 48 twice"})
    assert answer.status_code == 302
    assert GPU.objects.get(node=node, index=1).health == H.FENCED
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert page.count('data-gpu-action="fence"') == 3 and page.count('data-gpu-action="clear"') == 1
    assert "Usable GPUs: <strong>3</strong> of 4" in page

    client.post(reverse("node-gpu-action", args=[node.pk, 1, "clear"]), {"reason": ""})  # a reason is required
    assert GPU.objects.get(node=node, index=1).health == H.FENCED
    assert client.post(reverse("node-gpu-action", args=[node.pk, 9, "fence"]), {"reason": "x"}).status_code == 404
    assert client.post(reverse("node-gpu-action", args=[node.pk, 1, "melt"]), {"reason": "x"}).status_code == 404

    client.force_login(customer)
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert "data-gpu-action" not in page and "Usable GPUs: <strong>3</strong> of 4" in page
    answer = client.post(reverse("node-gpu-action", args=[node.pk, 2, "fence"]), {"reason": "mine"})
    assert answer.status_code == 403 and GPU.objects.get(node=node, index=2).health == H.HEALTHY


def test_the_page_forms_need_a_csrf_token(node, operator):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    answer = strict.post(reverse("node-gpu-action", args=[node.pk, 1, "fence"]), {"reason": "no token"})
    assert answer.status_code == 403 and GPU.objects.get(node=node, index=1).health == H.HEALTHY
