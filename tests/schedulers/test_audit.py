"""The fleet auditor's scheduler invariant against a real Slurm 22.05 cluster (sandbox.emulators.slurm):
out of production means cordoned (DRAIN) in Slurm; production means not, unless held for an
active check; an admin's drain on a production node is a "foreign cordon"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit import invariants as C
from audit.services import context
from nodes.models import Run

AGO = timezone.now() - timedelta(days=1)


@pytest.fixture(autouse=True)
def no_grace(settings):
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 0


def audit():
    agree, foreign = C.scheduler_agreement(context())
    return agree, foreign


def test_a_node_out_of_production_that_slurm_still_schedules_is_a_breach(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-01")
    # Planted: Nodewarden believes the node is out, and never asked Slurm to drain it.
    type(node).objects.filter(pk=node.pk).update(state="triage", state_changed_at=AGO)
    agree, _ = audit()
    [breach] = agree.breaches
    assert (breach.hostname, breach.believed, breach.world) == (
        node.hostname,
        "triage: out of production",
        "not cordoned",
    )
    assert breach.evidence["scheduler"] == "slurm" and breach.evidence["cordoned"] is False

    adapter.drain(node, reason="triage")
    agree, _ = audit()
    assert (agree.breaches, agree.checked) == ([], 1)


def test_a_production_node_nodewarden_left_cordoned_is_a_breach(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-02")
    type(node).objects.filter(pk=node.pk).update(state="production", state_changed_at=AGO)
    agree, foreign = audit()
    assert (agree.breaches, foreign.breaches, foreign.checked) == ([], [], 1)

    adapter.cordon(node, reason="re-validation")  # and never lifted: the bug the invariant catches
    agree, foreign = audit()
    [breach] = agree.breaches
    assert (breach.believed, breach.world, breach.evidence["owner"]) == (
        "production",
        "cordoned by Nodewarden",
        "nodewarden",
    )
    assert foreign.breaches == []


def test_an_admins_drain_on_a_production_node_is_a_foreign_cordon(slurm, slurm_node):
    node = slurm_node("gpu-s-03")
    type(node).objects.filter(pk=node.pk).update(state="production", state_changed_at=AGO)
    slurm.run("scontrol", "update", "nodename=gpu-s-03", "state=drain", "reason=admin: bad DIMM")
    agree, foreign = audit()
    [breach] = foreign.breaches
    assert (breach.world, breach.evidence["owner"]) == ("cordoned by root", "root")
    assert "bad DIMM" in breach.evidence["detail"] and agree.breaches == []


def test_a_production_node_held_for_an_active_check_is_excused(slurm, adapter, slurm_node):
    node = slurm_node("gpu-s-04")
    type(node).objects.filter(pk=node.pk).update(state="production", state_changed_at=AGO)
    adapter.cordon(node, reason="held for a GPU stress test")
    Run.objects.create(node=node, kind="gpu_stress", status="running", details={"scheduler_hold": True})
    agree, foreign = audit()
    assert (agree.breaches, foreign.breaches, agree.excused) == ([], [], 1)
