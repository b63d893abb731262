"""The training-step check on the portal: it names a workload (never a command), holds the
expected figures per hardware profile, and judges what the agent reports against them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from checks import services
from checks.specs import describe_figures
from checks.workloads import shortfalls
from health.models import Finding
from nodes.choices import RunStatus
from nodes.models import Run
from nodes.services import Actor
from tests.factories import HardwareProfileFactory, NodeFactory

from .conftest import report_health

pytestmark = pytest.mark.django_db

EXPECTED = {"min_samples_per_s": 20000, "max_loss": 2.5, "max_seconds": 60}
HEALTHY = {"samples_per_s": 52000.0, "loss": 1.15, "loss_finite": 1.0, "steps": 40.0, "seconds": 0.2}


@pytest.fixture
def trained_node(tenant):
    """An idle production node whose profile expects figures of two workloads."""
    profile = HardwareProfileFactory(
        name="HGX H100 train", workload_expectations={"tiny-train": EXPECTED, "llama-step": {"max_seconds": 300}}
    )
    node = NodeFactory(production=True, tenant=tenant, hardware_profile=profile)
    report_health(node, processes=0)
    return node


def ask(client, node, params):
    body = {"kind": "training_step", "params": params, "reason": "monthly training step"}
    return client.post(f"/api/nodes/{node.pk}/checks/", body, format="json")


def report(agent, run, figures, status="passed", summary="workload tiny-train: ran", now=None):
    now = now or timezone.now()
    body = {
        "status": status,
        "summary": summary,
        "figures": figures,
        "output": "",
        "started_at": (now - timedelta(seconds=5)).isoformat(),
        "finished_at": now.isoformat(),
    }
    return agent.post(f"/api/agent/checks/{run.pk}/result/", body, format="json")


def claimed(agent_for, node, workload="tiny-train"):
    run = services.request_check(
        node.pk, "training_step", params={"workload": workload}, actor=Actor.system("tests"), reason="r"
    )
    agent = agent_for(node)
    assert [c["params"] for c in agent.get("/api/agent/checks/").json()["checks"]] == [{"workload": workload}]
    return agent, run


# --- Requesting: a name, never a command ---------------------------------------------
def test_an_operator_asks_for_a_workload_the_profile_knows_and_the_default_is_the_builtin(
    api_as, operator, trained_node
):
    client = api_as(operator)
    response = ask(client, trained_node, {"workload": "llama-step"})
    assert response.status_code == 201, response.json()
    assert response.json()["params"] == {"workload": "llama-step"}
    services.cancel_check(response.json()["id"], actor=Actor.system("tests"), reason="again")

    assert ask(client, trained_node, {}).json()["params"] == {"workload": "tiny-train"}


@pytest.mark.parametrize("workload", ["mistral-step", "/bin/sh", "tiny-train; rm -rf /", ["/bin/sh", "-c", "id"], 7])
def test_the_portal_refuses_a_workload_name_it_does_not_know_with_a_400(api_as, operator, trained_node, workload):
    response = ask(api_as(operator), trained_node, {"workload": workload})

    assert response.status_code == 400
    assert response.json()["fields"]["params"] == [
        f"workload: must be a workload known for this node's hardware profile: llama-step, tiny-train (got {workload!r})"
    ]
    assert not Run.objects.exists()


def test_a_command_in_the_params_is_refused_not_ignored(api_as, operator, trained_node):
    response = ask(api_as(operator), trained_node, {"workload": "tiny-train", "argv": ["/bin/sh", "-c", "id"]})
    assert response.status_code == 400
    assert "argv: unknown parameter for training_step" in response.json()["fields"]["params"][0]


# --- Judging: the profile's figures ---------------------------------------------------
def test_figures_that_meet_the_profile_pass_and_raise_no_finding(agent_for, trained_node):
    agent, run = claimed(agent_for, trained_node)

    assert report(agent, run, HEALTHY).status_code == 200
    run.refresh_from_db()
    assert (run.status, run.figures) == (RunStatus.PASSED, HEALTHY)
    assert not Finding.objects.exists()
    assert describe_figures("training_step", run.figures) == "52,000 samples/s, loss 1.15"


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        (
            {**HEALTHY, "samples_per_s": 7559.9},
            "tiny-train: throughput samples_per_s 7559.9 below the expected 20000",
        ),
        (
            {"samples_per_s": 52000.0, "loss_finite": 0.0, "steps": 40.0, "seconds": 0.2},
            "tiny-train: loss is not finite (NaN or infinity)",
        ),
        ({**HEALTHY, "seconds": 95.0}, "tiny-train: time seconds 95 above the expected 60"),
        ({**HEALTHY, "loss": 3.1}, "tiny-train: final loss loss 3.1 above the expected 2.5"),
        (
            {"loss": 1.0, "loss_finite": 1.0},
            (
                "tiny-train: the workload reported no samples_per_s (throughput; expected min 20000); "
                "the workload reported no seconds (time; expected max 60)"
            ),
        ),
    ],
)
def test_figures_that_miss_the_profile_fail_the_run_with_a_finding(agent_for, trained_node, figures, why):
    agent, run = claimed(agent_for, trained_node)
    now = timezone.now()

    response = report(agent, run, figures, now=now)

    assert response.status_code == 200 and response.json()["status"] == "failed"
    run.refresh_from_db()
    assert (run.status, run.summary, run.figures) == (RunStatus.FAILED, why, figures)
    finding = Finding.objects.get(node=trained_node)
    assert (finding.rule, finding.subject) == ("active_check", "training_step")
    assert finding.summary == f"Training-step check failed: {why}"
    assert finding.evidence["figures"] == figures
    # The agent retries a post it got no answer to: the same result is judged the same, a no-op.
    assert report(agent, run, figures, now=now).status_code == 200
    assert Finding.objects.filter(node=trained_node).count() == 1


def test_not_available_and_an_agent_failure_stand_as_reported(agent_for, trained_node):
    agent, run = claimed(agent_for, trained_node)
    summary = "workload tiny-train: PyTorch is not installed on the node"
    report(agent, run, {}, status="not_available", summary=summary)
    run.refresh_from_db()
    assert (run.status, run.summary) == (RunStatus.NOT_AVAILABLE, summary)
    assert not Finding.objects.exists(), "a missing library is not a hardware failure"

    agent, run = claimed(agent_for, trained_node, "llama-step")
    report(agent, run, {"timed_out": 1.0, "seconds": 300.0}, status="failed", summary="did not finish")
    run.refresh_from_db()
    assert (run.status, run.summary) == (RunStatus.FAILED, "did not finish")


def test_without_expected_figures_the_builtin_is_held_to_a_finite_loss_only(agent_for, idle_node):
    assert idle_node.hardware_profile.workload_expectations == {}
    agent, run = claimed(agent_for, idle_node)
    report(agent, run, {"samples_per_s": 1.0, "loss": 9.0, "loss_finite": 1.0})
    run.refresh_from_db()
    assert run.status == RunStatus.PASSED
    assert shortfalls({"samples_per_s": 1.0}, {}) == ["the workload reported no loss"]


# --- The profile's expected figures ---------------------------------------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "Must be a JSON object"),
        ({"Tiny Train": {}}, "a workload name is lower-case"),
        ({"tiny-train": 5}, "must be an object of expected figures"),
        ({"tiny-train": {"min_tflops": 1}}, "unknown expected figure 'min_tflops'"),
        ({"tiny-train": {"max_loss": "2"}}, "tiny-train.max_loss: must be a number"),
        ({"tiny-train": {"max_seconds": -1}}, "must not be negative"),
    ],
)
def test_malformed_expected_figures_are_refused_on_the_profile(value, message):
    profile = HardwareProfileFactory.build(name="X", workload_expectations=value)
    with pytest.raises(ValidationError) as raised:
        profile.full_clean()
    assert message in str(raised.value.message_dict["workload_expectations"])
