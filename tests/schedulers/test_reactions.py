"""Every lifecycle verb's reaction in the workload scheduler, walked against a real Slurm 22.05.

The table below is the specification, written independently of ``schedulers.reactions``: for
each verb, one (source -> target) move of the lifecycle, and what ``scontrol show node`` must say
afterwards. A customer job runs on the node before every move out of production, so "evict"
(the job is gone) and "drain" (the job carries on) can be told apart. The transition runs
through ``nodes.services`` and its follow-up task, as in production; only the scheduler's
handlers run (Day 1 stages and remediation have their own tests).
"""

from __future__ import annotations

import pytest

from nodes import followups, services
from nodes.choices import NodeState
from schedulers.base import SchedulerConflict
from schedulers.reactions import REACTIONS, follow_drains
from schedulers.slurm import SlurmAdapter
from tests.factories import NodeFactory
from tests.validation.conftest import eager  # noqa: F401

pytestmark = pytest.mark.django_db
S = NodeState
ACTOR = services.Actor.system("test")

# What the scheduler must say after the verb: "evict" (drained, job gone), "drain" (drained, job still
# running), "cordon" (drained, no job), "resume" (not drained), None (untouched: not in a scheduler yet).
# The reason Slurm shows starts with "nodewarden: <the target state's label>:".
SPEC: dict[str, tuple[str, str, str | None]] = {
    "start_initialization": (S.ENROLLED, S.INITIALIZING, None),
    "mark_onboard": (S.INITIALIZING, S.ONBOARD, "cordon"),
    "start_validation": (S.ONBOARD, S.FIRMWARE_UPDATE, "cordon"),
    "revalidate": (S.TRIAGE, S.FIRMWARE_UPDATE, "cordon"),
    "pass_firmware": (S.FIRMWARE_UPDATE, S.INVENTORY_CHECK, "cordon"),
    "pass_inventory_check": (S.INVENTORY_CHECK, S.BURN_IN, "cordon"),
    "pass_burn_in": (S.BURN_IN, S.FABRIC_CHECK, "cordon"),
    "pass_fabric_check": (S.FABRIC_CHECK, S.RELIABILITY_ASSESSMENT, "cordon"),
    "release_to_production": (S.RELIABILITY_ASSESSMENT, S.PRODUCTION, "resume"),
    "fail_validation": (S.BURN_IN, S.TRIAGE, "cordon"),
    "request_drain": (S.PRODUCTION, S.DRAIN_PENDING, "drain"),
    "cancel_drain": (S.DRAIN_PENDING, S.PRODUCTION, "resume"),
    "start_draining": (S.PRODUCTION, S.DRAINING, "drain"),
    "complete_drain": (S.DRAINING, S.TRIAGE, "cordon"),
    "start_maintenance": (S.PRODUCTION, S.DRAIN_PENDING, "drain"),
    "end_maintenance": (S.MAINTENANCE, S.FIRMWARE_UPDATE, "cordon"),
    "cordon": (S.PRODUCTION, S.TRIAGE, "evict"),
    "start_remediation": (S.TRIAGE, S.REMEDIATING, "cordon"),
    "fail_remediation": (S.REMEDIATING, S.TRIAGE, "cordon"),
    "send_to_repair": (S.TRIAGE, S.REPAIR, "cordon"),
    "send_to_rma": (S.REPAIR, S.RMA, "cordon"),
    "decommission": (S.TRIAGE, S.DECOMMISSIONED, "cordon"),
}
OUT = {"cordon", "evict"}  # source states out of production: Nodewarden's drain is in place before the move


@pytest.fixture
def scheduler_handlers_only(monkeypatch):
    """Only the scheduler's handlers run after a transition (the Day 1 stages and remediation would
    move the node on; their own tests cover them)."""
    kept = {name: [h for h in hs if h.__module__ == "schedulers.reactions"] for name, hs in followups.FOLLOWUPS.items()}
    monkeypatch.setattr(followups, "FOLLOWUPS", kept)


def test_the_spec_names_every_verb():
    assert set(SPEC) == set(services.VERBS) == set(REACTIONS) - {"force_state"}


@pytest.mark.parametrize("verb", sorted(SPEC))
def test_each_verb_reaches_slurm(verb, slurm, slurm_cluster, eager, scheduler_handlers_only):  # noqa: F811
    source, target, expected = SPEC[verb]
    node = NodeFactory(hostname="gpu-s-01.dc1.example.net", cluster=slurm_cluster, state=source)
    adapter = SlurmAdapter(slurm_cluster)
    job = None
    if source in (S.PRODUCTION, S.DRAIN_PENDING, S.DRAINING):
        job = slurm.submit("gpu-s-01", 300, "customer-train")
        slurm.wait_job_running(job)
    if source not in (S.PRODUCTION, S.ENROLLED, S.INITIALIZING, S.ONBOARD):  # already out: our drain is there
        adapter.drain(node, reason=f"{NodeState(source).label}: earlier")
    with eager():
        services.VERBS[verb](node.pk, actor=ACTOR, reason=f"table walk {verb}")
    node.refresh_from_db()
    assert node.state == target, verb  # the scheduler's own handlers do not move these nodes on
    info = adapter.show_node(node)
    if expected is None:
        assert not info.drain_flag and not info.reason
        return
    if expected == "resume":
        assert not info.drain_flag, info.describe()
        return
    assert info.drain_flag and info.ours, info.describe()
    assert info.reason.startswith(f"nodewarden: {NodeState(target).label}:"), info.describe()
    if expected == "drain":
        assert slurm.job_state(job) == "R"  # the customer's job carries on
    if expected == "evict":
        assert slurm.job_state(job) in ("PD", "CA", "CG")  # requeued or cancelled, not left running


def test_a_node_in_triage_no_longer_says_drain_pending_in_sinfo(slurm, slurm_cluster, eager):  # noqa: F811
    node = NodeFactory(hostname="gpu-s-02.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION)
    with eager():
        services.request_drain(node.pk, actor=ACTOR, reason="operator: suspect DIMM")
    node.refresh_from_db()
    assert node.state == S.TRIAGE  # idle: drain pending -> draining -> triage at once
    reasons = slurm.run("sinfo", "-R", "-h", "-N", "-o", "%N|%E").stdout
    line = next((row for row in reasons.splitlines() if row.startswith("gpu-s-02|")), reasons)
    assert "Triage: " in line and "Drain pending" not in line, line


def test_an_operators_cordon_from_the_api_evicts_the_slurm_job(slurm, slurm_cluster, eager, operator, client):  # noqa: F811
    node = NodeFactory(hostname="gpu-s-03.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION)
    job = slurm.submit("gpu-s-03", 300, "customer-train")
    slurm.wait_job_running(job)
    client.force_login(operator)
    with eager():
        response = client.post(
            f"/api/nodes/{node.pk}/transitions/cordon/",
            {"reason": "smoke from the rack"},
            content_type="application/json",
        )
    assert response.status_code == 201, response.content
    info = SlurmAdapter(slurm_cluster).show_node(node)
    assert info.drain_flag and info.reason.startswith("nodewarden: Triage: smoke from the rack")
    assert slurm.job_state(job) in ("PD", "CA", "CG")


def test_an_admins_drain_is_never_lifted_and_is_said_so(slurm, slurm_cluster, eager):  # noqa: F811
    node = NodeFactory(hostname="gpu-s-04.dc1.example.net", cluster=slurm_cluster, state=S.DRAIN_PENDING)
    slurm.run("scontrol", "update", "nodename=gpu-s-04", "state=drain", "reason=admin: bad DIMM")
    with eager():
        services.cancel_drain(node.pk, actor=ACTOR, reason="the condition cleared")
    info = SlurmAdapter(slurm_cluster).show_node(node)
    assert info.drain_flag and info.reason == "admin: bad DIMM"
    assert node.events.filter(reason__startswith="The scheduler keeps the node out").exists()
    with pytest.raises(SchedulerConflict):
        SlurmAdapter(slurm_cluster).uncordon(node, reason="again")


def test_a_reaction_that_cannot_reach_slurm_is_owed_and_retried(slurm, slurm_cluster, eager, tmp_path):  # noqa: F811
    from schedulers.models import PendingReaction

    good = slurm_cluster.scheduler_endpoint
    slurm_cluster.scheduler_endpoint = str(tmp_path / "missing-slurm.conf")  # slurmctld unreachable
    slurm_cluster.save()
    node = NodeFactory(hostname="gpu-s-01.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION)
    job = slurm.submit("gpu-s-01", 300, "customer-train")
    slurm.wait_job_running(job)
    with eager():
        services.cordon(node.pk, actor=ACTOR, reason="operator: smoke")
    owed = PendingReaction.objects.get(node=node)
    assert owed.reaction == "evict" and "not a file" in owed.last_error
    slurm_cluster.scheduler_endpoint = good  # slurmctld is back
    slurm_cluster.save()
    follow_drains(now=owed.next_attempt_at)
    assert not PendingReaction.objects.filter(node=node).exists()
    info = SlurmAdapter(slurm_cluster).show_node(node)
    assert info.drain_flag and info.reason.startswith("nodewarden: Triage:")
    assert slurm.job_state(job) in ("PD", "CA", "CG")  # the eviction owed was still an eviction


def test_slurms_reason_names_the_finding_while_the_node_is_out_and_is_cleared_on_return(slurm, slurm_cluster, eager):  # noqa: F811
    node = NodeFactory(hostname="gpu-s-02.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION)
    finding = "Remediation 7: XID 79: GPU 2 has fallen off the bus"
    adapter = SlurmAdapter(slurm_cluster)
    with eager():
        services.request_drain(node.pk, actor=ACTOR, reason=finding)
    node.refresh_from_db()
    assert node.state == S.TRIAGE  # idle: drained at once; the later moves' reasons name no finding
    info = adapter.show_node(node)
    assert info.drain_flag and info.reason.startswith("nodewarden: Triage: The workload scheduler reports")
    assert finding in info.reason, info.describe()
    with eager():
        services.start_remediation(node.pk, actor=ACTOR, reason="GPU reset (remediation 7)")
    info = adapter.show_node(node)
    assert info.reason.startswith("nodewarden: Remediation in progress: GPU reset") and finding in info.reason, (
        info.describe()
    )

    with eager():
        services.force_state(node.pk, S.PRODUCTION, actor=ACTOR, reason="re-validated")
    info = adapter.show_node(node)
    assert not info.drain_flag and not info.reason, info.describe()
