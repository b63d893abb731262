"""Day 1 pages and API: the node's stage table, start and skip with a reason, the fleet
summary, and tenant scoping (another tenant's node answers 404)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from nodes import services as node_services
from nodes.choices import NodeState, RunStatus
from nodes.services import Actor
from validation import services

from .conftest import idle_report, send

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def at_inventory(node_in, eager, tenant):
    node = node_in(S.FIRMWARE_UPDATE, tenant=tenant)
    with eager():
        node_services.pass_firmware(node.pk, actor=Actor.system("tests"), reason="firmware verified")
    return node


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_node_page_shows_each_stage_and_the_open_one(client, operator, at_inventory):
    client.force_login(operator)
    html = client.get(reverse("node-day1", args=[at_inventory.pk])).content.decode()
    assert 'data-stage="inventory" data-status="running"' in html
    assert 'data-stage="burn_in" data-status="pending"' in html
    assert "Skip stage" in html and "Start stage" not in html  # a run is open: no second one


def test_an_operator_skips_from_the_page_and_the_reason_is_kept(client, operator, at_inventory, eager):
    client.force_login(operator)
    with eager():
        response = client.post(
            reverse("node-stage-action", args=[at_inventory.pk, "skip"]), {"reason": "vendor-certified tray"}
        )
    assert response.status_code == 302
    at_inventory.refresh_from_db()
    assert at_inventory.state == S.BURN_IN


def test_a_blank_reason_is_refused_on_the_page_with_a_message(client, operator, at_inventory):
    client.force_login(operator)
    response = client.post(reverse("node-stage-action", args=[at_inventory.pk, "skip"]), {"reason": " "}, follow=True)
    assert "A reason is required." in response.content.decode()
    at_inventory.refresh_from_db()
    assert at_inventory.state == S.INVENTORY_CHECK


def test_a_viewer_may_not_skip(client, viewer, at_inventory):
    client.force_login(viewer)
    response = client.post(reverse("node-stage-action", args=[at_inventory.pk, "skip"]), {"reason": "x"})
    assert response.status_code == 403


def test_the_api_lists_stage_runs_with_their_evidence(operator, at_inventory, eager):
    report = idle_report(at_inventory, gpus=6)
    send(at_inventory, report)
    with eager():
        services.advance_open_stages()
    body = api(operator).get(reverse("api:node-stages", args=[at_inventory.pk])).json()
    (run,) = body["results"]
    assert run["stage"] == "inventory" and run["status"] == RunStatus.FAILED
    assert run["evidence"]["gpu_count"] == 6 and "GPU count 6" in run["summary"]


def test_the_api_answers_409_400_403_and_404(operator, viewer, customer, other_tenant, at_inventory, node_in):
    url = reverse("api:node-stage-start", args=[at_inventory.pk])
    assert api(operator).post(url, {"reason": "again"}).status_code == 409  # the inventory run is open
    assert api(operator).post(url, {"reason": ""}).status_code == 400
    assert api(viewer).post(url, {"reason": "x"}).status_code == 403
    elsewhere = node_in(S.INVENTORY_CHECK, tenant=other_tenant)
    assert api(customer).get(reverse("api:node-stages", args=[elsewhere.pk])).status_code == 404
    assert api(customer).get(reverse("api:node-stages", args=[at_inventory.pk])).status_code == 200


def test_the_api_skip_returns_the_skipped_run(operator, at_inventory, eager):
    with eager():
        response = api(operator).post(reverse("api:node-stage-skip", args=[at_inventory.pk]), {"reason": "known good"})
    assert response.status_code == 201 and response.json()["status"] == RunStatus.SKIPPED


def test_the_fleet_summary_counts_stages_and_groups_failure_reasons(operator, client, node_in, eager):
    for gpus in (7, 6):
        node = node_in(S.FIRMWARE_UPDATE)
        with eager():
            node_services.pass_firmware(node.pk, actor=Actor.system("tests"), reason="ok")
        send(node, idle_report(node, gpus=gpus))
    waiting = node_in(S.FIRMWARE_UPDATE)
    with eager():
        node_services.pass_firmware(waiting.pk, actor=Actor.system("tests"), reason="ok")
        services.advance_open_stages()
    body = api(operator).get(reverse("api:day1-summary")).json()
    counts = {c["stage"]: c["count"] for c in body["counts"]}
    assert counts["inventory"] == 1
    (failure,) = body["failures"]
    assert failure["count"] == 2 and failure["stage"] == "inventory"
    assert body["day1_yield"] == {"released": 0, "failed": 2, "yield_pct": 0.0}
    client.force_login(operator)
    html = client.get(reverse("day1-overview")).content.decode()
    assert waiting.hostname in html and "GPU count N, profile" in html


def test_a_customer_sees_only_their_nodes_in_the_summary(customer, node_in, tenant):
    node_in(S.BURN_IN, tenant=tenant)
    node_in(S.BURN_IN)
    body = api(customer).get(reverse("api:day1-summary")).json()
    assert {c["stage"]: c["count"] for c in body["counts"]}["burn_in"] == 1


def test_failure_reasons_blank_the_figures_but_not_numbers_inside_words(node_in):
    from django.utils import timezone

    from nodes.choices import RunKind
    from nodes.models import Node, Run
    from validation.summary import failure_reasons

    for gpus in (7, 6):
        Run.objects.create(
            node=node_in(S.TRIAGE),
            kind=RunKind.STAGE_INVENTORY,
            status=RunStatus.FAILED,
            finished=timezone.now(),
            summary=f"GPU count {gpus}, profile 8-GPU H100 wants 8 on link x16",
        )
    (failure,) = failure_reasons(Node.objects.all())
    assert failure["count"] == 2
    assert failure["reason"] == "GPU count N, profile 8-GPU H100 wants N on link x16"
