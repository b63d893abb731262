"""The node agent's side: GET /api/agent/checks/ and POST /api/agent/checks/{id}/result/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checks import services
from health.models import Finding
from nodes.choices import RunStatus
from nodes.models import Run
from nodes.services import Actor
from tests.factories import NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db
POLL = "/api/agent/checks/"


def result_url(run) -> str:
    return f"/api/agent/checks/{run.pk}/result/"


def queue(node, kind="gpu_stress", **params) -> Run:
    return services.request_check(node.pk, kind, params=params, actor=Actor.system("tests"), reason="why not")


def body(status="passed", **overrides) -> dict:
    now = timezone.now()
    return {
        "status": status,
        "summary": "ok",
        "figures": {"gpu0_tflops": 612.5, "min_tflops": 612.5, "errors": 0},
        "output": "done\n",
        "started_at": (now - timedelta(seconds=75)).isoformat(),
        "finished_at": now.isoformat(),
        **overrides,
    }


def take(agent, run) -> None:
    response = agent.get(POLL)
    assert [c["id"] for c in response.json()["checks"]] == [run.pk]


# --- Polling --------------------------------------------------------------------
def test_an_idle_node_gets_its_queued_checks_once(agent, idle_node):
    run = queue(idle_node, "dcgm_diag", level=3)

    response = agent.get(POLL)
    assert response.status_code == 200
    assert response.json() == {
        "idle": True,
        "reason": "No GPU compute processes in a fresh report.",
        "checks": [{"id": run.pk, "kind": "dcgm_diag", "params": {"level": 3}}],
    }
    assert agent.get(POLL).json()["checks"] == []


def test_a_busy_node_is_told_it_is_not_idle_and_gets_nothing(agent, node):
    run = queue(node)
    report_health(node, processes=1)

    assert agent.get(POLL).json() == {"idle": False, "reason": "1 GPU compute process(es) running.", "checks": []}
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


@pytest.mark.parametrize("age", [timedelta(minutes=2), None])
def test_a_node_with_a_stale_or_missing_report_is_not_idle(agent, node, age):
    queue(node)
    if age is not None:
        report_health(node, processes=0, age=age)
    answer = agent.get(POLL).json()
    assert answer["idle"] is False and answer["checks"] == [] and answer["reason"]


def test_the_agent_only_gets_its_own_nodes_checks(agent, idle_node):
    other = NodeFactory(production=True)
    report_health(other, processes=0)
    queue(other)
    assert agent.get(POLL).json()["checks"] == []


def test_agent_endpoints_need_an_agent_token(client, api_as, operator, idle_node):
    assert client.get(POLL).status_code in (401, 403)
    assert api_as(operator).get(POLL).status_code == 403  # a portal user is not a node agent
    client.defaults["HTTP_AUTHORIZATION"] = "Bearer nwa_not-a-real-token"
    assert client.get(POLL).status_code == 401


# --- Results ------------------------------------------------------------------------
def test_the_agent_reports_a_result(agent, idle_node):
    run = queue(idle_node)
    take(agent, run)

    response = agent.post(result_url(run), body(), format="json")
    assert response.status_code == 200 and response.json() == {"id": run.pk, "status": "passed"}
    run.refresh_from_db()
    assert run.status == RunStatus.PASSED
    assert run.figures == {"gpu0_tflops": 612.5, "min_tflops": 612.5, "errors": 0}


def test_a_repeated_identical_post_is_accepted_and_changes_nothing(agent, idle_node):
    run = queue(idle_node)
    take(agent, run)
    sent = body()
    agent.post(result_url(run), sent, format="json")

    response = agent.post(result_url(run), sent, format="json")
    assert response.status_code == 200 and response.json()["status"] == "passed"


def test_a_conflicting_second_post_is_409(agent, idle_node):
    run = queue(idle_node)
    take(agent, run)
    agent.post(result_url(run), body(), format="json")

    response = agent.post(result_url(run), body("failed", summary="GPU 3 slow"), format="json")
    assert response.status_code == 409 and "different result" in response.json()["detail"]


def test_another_nodes_agent_gets_404_for_the_run(agent_for, agent, idle_node):
    run = queue(idle_node)
    take(agent, run)
    stranger = agent_for(NodeFactory(production=True))

    assert stranger.post(result_url(run), body(), format="json").status_code == 404
    assert agent.post("/api/agent/checks/999999/result/", body(), format="json").status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status": "queued"}, "status"),
        ({"summary": "x" * 301}, "summary"),
        ({"figures": {"busbw": "fast"}}, "figures"),
        ({"figures": {"ok": True}}, "figures"),
        ({"figures": [1, 2]}, "figures"),
        ({"output": "x" * (64 * 1024 + 1)}, "output"),
        ({"started_at": "yesterday"}, "started_at"),
        ({"finished_at": (timezone.now() - timedelta(days=1)).isoformat()}, "finished_at"),
    ],
)
def test_a_bad_body_is_400_naming_the_field(agent, idle_node, change, field):
    run = queue(idle_node)
    take(agent, run)
    response = agent.post(result_url(run), body(**change), format="json")
    # A nested field is named by its path ("figures.busbw").
    assert response.status_code == 400 and field in {k.split(".")[0] for k in response.json()["fields"]}, (
        response.json()
    )


def test_a_body_without_the_required_fields_is_400(agent, idle_node):
    run = queue(idle_node)
    take(agent, run)
    response = agent.post(result_url(run), {"status": "passed"}, format="json")
    assert response.status_code == 400 and {"started_at", "finished_at"} <= set(response.json()["fields"])


def test_a_failed_result_raises_a_finding_and_not_available_does_not(agent, idle_node):
    stress, diag = queue(idle_node, "gpu_stress"), queue(idle_node, "dcgm_diag")
    agent.get(POLL)

    agent.post(result_url(diag), body("not_available", summary="dcgmi not installed", figures={}), format="json")
    assert not Finding.objects.exists()
    agent.post(result_url(stress), body("failed", summary="GPU 5 at 401 TFLOP/s"), format="json")
    (finding,) = Finding.objects.all()
    assert (finding.subject, finding.severity) == ("gpu_stress", "degraded")


def test_a_form_encoded_result_is_400_not_500(agent, idle_node):
    """The schema offers multipart and form bodies too; there "figures" arrives as a string, which
    the figures check read as a dict (AttributeError, a 500; found by tests/api/test_fuzz.py)."""
    run = queue(idle_node)
    take(agent, run)
    response = agent.post(result_url(run), {**body(), "figures": "{}"}, format="multipart")
    assert response.status_code == 400 and "figures" in response.json()["fields"], response.content
