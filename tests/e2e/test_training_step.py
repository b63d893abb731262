"""The training-step check end to end: an operator asks for it through the API, the real agent
claims it, trains the builtin tiny model (PyTorch on the CPU here) and reports its figures
over HTTP, and the portal judges them against the node's hardware profile."""

from __future__ import annotations

import pytest

from health.models import Finding
from nodes.models import Run

from .conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_requested_training_step_trains_on_the_node_and_is_judged_by_the_profile(
    live_server, node, agent_token, hardware, operator
):
    pytest.importorskip("torch", reason="the builtin workload needs PyTorch (agent extra 'workload')")
    profile = node.hardware_profile
    profile.workload_expectations = {"tiny-train": {"min_samples_per_s": 100, "max_loss": 2.3, "max_seconds": 120}}
    profile.save()
    portal = Portal(live_server.url, operator)
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()  # the node reports 0 compute processes: idle

    status, run = portal.post(f"/api/nodes/{node.pk}/checks/", {"kind": "training_step", "reason": "monthly"})
    assert status == 201 and run["params"] == {"workload": "tiny-train"}, run
    agent.poll_checks(wait=True)

    status, done = portal.get(f"/api/checks/{run['id']}/")
    assert status == 200 and done["status"] == "passed", done
    figures = done["figures"]
    assert figures["steps"] == 40 and figures["samples_per_s"] >= 100 and figures["loss_finite"] == 1
    assert done["figures_text"].endswith(f"samples/s, loss {figures['loss']:.4g}")
    assert not Finding.objects.exists()

    # The same node held to figures no node reaches: the same road ends in a failed run and a finding.
    profile.workload_expectations = {"tiny-train": {"min_samples_per_s": 1e12}}
    profile.save()
    agent.cycle()
    status, run = portal.post(f"/api/nodes/{node.pk}/checks/", {"kind": "training_step", "reason": "again"})
    agent.poll_checks(wait=True)

    failed = Run.objects.get(pk=run["id"])
    assert failed.status == "failed"
    assert (
        failed.summary.startswith("tiny-train: throughput samples_per_s ")
        and "below the expected 1e+12" in failed.summary
    )
    assert Finding.objects.get(node=node).summary == f"Training-step check failed: {failed.summary}"


def test_the_portal_cannot_make_the_agent_run_a_workload_missing_from_its_config(
    live_server, node, agent_token, hardware, operator
):
    # A portal whose database says "run this" for a name the node never configured: the agent refuses.
    profile = node.hardware_profile
    profile.workload_expectations = {"llama-step": {"max_seconds": 300}}
    profile.save()
    portal = Portal(live_server.url, operator)
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()
    status, run = portal.post(
        f"/api/nodes/{node.pk}/checks/", {"kind": "training_step", "params": {"workload": "llama-step"}, "reason": "r"}
    )
    assert status == 201, run

    agent.poll_checks(wait=True)

    done = Run.objects.get(pk=run["id"])
    assert (done.status, done.summary) == (
        "error",
        "workload 'llama-step' is not in this agent's config (configured: tiny-train)",
    )
    assert not Finding.objects.exists()
