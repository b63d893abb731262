"""The node page's "Active checks" partial and its request form."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from checks import services
from checks.services import CheckResult
from nodes.choices import RunStatus
from nodes.models import Run
from nodes.services import Actor
from tests.factories import NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db


def partial(client, node):
    return client.get(reverse("node-checks", args=[node.pk]))


def finished_run(node, kind, figures, status="passed"):
    run = services.request_check(node.pk, kind, actor=Actor.system("tests"), reason="routine")
    report_health(node, processes=0)
    services.claim_checks_for_agent(node.pk)
    now = timezone.now()
    services.record_check_result(
        run.pk,
        node.pk,
        result=CheckResult(
            status=status,
            summary="within limits",
            figures=figures,
            output="",
            started_at=now - timedelta(seconds=95),
            finished_at=now,
        ),
    )
    return run


def test_operators_see_the_form_the_idle_state_and_the_runs_with_their_figures(client, operator, node):
    finished_run(node, "nccl_test", {"busbw_gbps": 362})
    finished_run(node, "gpu_stress", {f"gpu{i}_tflops": 612.0 + i for i in range(8)} | {"min_tflops": 612.0})
    client.force_login(operator)

    response = partial(client, node)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="check-request-form"' in html and reverse("node-check-request", args=[node.pk]) in html
    assert "Node is idle" in html
    assert "busbw 362 GB/s" in html and "min 612 TFLOP/s over 8 GPUs" in html and "95 s" in html
    assert html.count('data-status="passed"') == 2


def test_operators_are_told_why_queued_checks_wait(client, operator, node):
    report_health(node, processes=4)
    client.force_login(operator)
    assert "Not idle, queued checks wait: 4 GPU compute process(es) running." in partial(client, node).content.decode()


def test_customers_see_their_nodes_runs_read_only(client, customer, node):
    finished_run(node, "dcgm_diag", {"tests_passed": 12, "tests_failed": 0, "level": 2})
    client.force_login(customer)

    html = partial(client, node).content.decode()
    assert "0 failed, 12 passed (level 2)" in html
    assert "check-request-form" not in html and "idle" not in html


def test_customers_get_404_for_other_tenants_nodes(client, customer):
    client.force_login(customer)
    assert partial(client, NodeFactory(production=True)).status_code == 404


def test_the_partial_shows_only_active_checks_and_costs_a_fixed_number_of_queries(
    client, operator, node, django_assert_max_num_queries
):
    for kind in ("gpu_stress", "dcgm_diag", "nccl_test", "memory_test"):
        services.request_check(node.pk, kind, actor=Actor(user=operator), reason="routine")
    Run.objects.create(node=node, kind="transition_followup")
    client.force_login(operator)
    # session, user, permissions (2), node, runs with requester, node health
    with django_assert_max_num_queries(8):
        html = partial(client, node).content.decode()
    assert html.count("data-run=") == 4


def test_an_operator_requests_a_check_from_the_form(client, operator, node):
    client.force_login(operator)
    response = client.post(
        reverse("node-check-request", args=[node.pk]), {"kind": "dcgm_diag", "reason": "after the reboot"}
    )

    assert response.status_code == 302 and response["Location"] == reverse("node-detail", args=[node.pk])
    run = Run.objects.get(node=node)
    assert (run.kind, run.status, run.params, run.requested_by) == (
        "dcgm_diag",
        RunStatus.QUEUED,
        {"level": 2},
        operator,
    )
    (message,) = get_messages(response.wsgi_request)
    assert str(message).startswith("DCGM diagnostics queued")


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"kind": "dcgm_diag", "reason": ""}, "A reason is required."),
        ({"kind": "burn", "reason": "why"}, "Unknown check kind 'burn'"),
    ],
)
def test_the_form_flashes_refusals_and_queues_nothing(client, operator, node, form, message):
    client.force_login(operator)
    response = client.post(reverse("node-check-request", args=[node.pk]), form, follow=True)
    assert message in " ".join(str(m) for m in response.context["messages"])
    assert not Run.objects.exists()


def test_customers_may_not_post_the_form(client, customer, node):
    client.force_login(customer)
    response = client.post(reverse("node-check-request", args=[node.pk]), {"kind": "dcgm_diag", "reason": "r"})
    assert response.status_code == 403 and not Run.objects.exists()
