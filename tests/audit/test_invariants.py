"""Each invariant of the fleet auditor, with a planted breach and without it (factories; the
scheduler and BMC invariants against real Slurm and sushy-tools are in tests/schedulers/test_audit.py
and tests/bmc/test_audit.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit import invariants as C
from audit.services import context
from fleet.choices import SchedulerKind
from health.services import raise_finding
from nodes.models import Run
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation, RemediationPolicy, RemediationStep
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db
AGO = timezone.now() - timedelta(days=2)


def run(check, **kwargs):
    return {o.invariant: o for o in check(context(), **kwargs)}


def breaches(check, invariant, **kwargs):
    return [(b.hostname, b.world) for b in run(check, **kwargs)[invariant].breaches]


def degraded(node, summary="7 GPUs visible, expected 8", rule="gpu_count"):
    return raise_finding(node.pk, rule=rule, severity="degraded", summary=summary, evidence={"visible": 7})


# --- 1. Scheduler agreement (without a scheduler; real Slurm in tests/schedulers/test_audit.py) -----------


def test_a_node_that_changes_state_while_its_scheduler_is_asked_is_not_a_breach(monkeypatch):
    """Seen in the demo: a production node got a fault and was cordoned between the auditor reading
    its state and asking the scheduler; "production, cordoned by Nodewarden" was a false breach."""
    from nodes import services as node_services
    from schedulers import base

    node = NodeFactory(
        state="production", cluster=ClusterFactory(scheduler_kind=SchedulerKind.SLURM), state_changed_at=AGO
    )

    class Racing(base.NoScheduler):
        def drain_state(self, asked):
            node_services.cordon(node.pk, actor=node_services.Actor.system("health"), reason="XID 79 just now")
            return base.DrainState(cordoned=True, drained=False, running_jobs=1, owner=base.OWNER)

    monkeypatch.setattr(base, "adapter_for", lambda cluster: Racing(cluster))
    outcome = run(C.scheduler_agreement)[C.Invariant.SCHEDULER_AGREEMENT]
    assert outcome.breaches == [] and node.pk in outcome.unsure


def test_a_cluster_without_a_scheduler_always_agrees():
    NodeFactory(production=True, cluster=ClusterFactory(scheduler_kind=SchedulerKind.NONE))
    NodeFactory(state="triage", cluster=ClusterFactory(scheduler_kind=SchedulerKind.NONE))
    outcome = run(C.scheduler_agreement)["scheduler_agreement"]
    assert (outcome.breaches, outcome.checked, outcome.unknown) == ([], 0, 0)


def test_an_unreachable_scheduler_is_unknown_not_a_breach():
    cluster = ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint="/nonexistent/slurm.conf")
    NodeFactory(state="triage", cluster=cluster, state_changed_at=AGO)
    outcome = run(C.scheduler_agreement)["scheduler_agreement"]
    assert (outcome.breaches, outcome.checked, outcome.unknown) == ([], 0, 1)


def test_a_hold_for_an_active_check_is_read_from_the_run_details():
    held, plain, finished = NodeFactory(production=True), NodeFactory(production=True), NodeFactory(production=True)
    Run.objects.create(node=held, kind="gpu_stress", status="running", details={"scheduler_hold": True})
    Run.objects.create(node=plain, kind="gpu_stress", status="running", details={})
    Run.objects.create(node=finished, kind="gpu_stress", status="passed", details={"scheduler_hold": True})
    assert C.scheduler_holds([held.pk, plain.pk, finished.pk]) == {held.pk}


# --- 2. No production node with an alert nothing acts on ------------------------------------------------


def test_a_degraded_alert_on_a_production_node_with_nothing_acting_is_a_breach():
    node = NodeFactory(production=True, state_changed_at=AGO)
    degraded(node)
    [breach] = run(C.unhandled_alerts)["unhandled_alert"].breaches
    assert (breach.hostname, breach.believed) == (node.hostname, "production, no open remediation")
    assert "7 GPUs visible, expected 8" in breach.world
    assert breach.evidence["rule"] == "gpu_count" and breach.evidence["last_remediation"] is None


def test_a_node_returned_to_production_while_its_alert_keeps_firing_is_a_breach():
    node = NodeFactory(production=True, state_changed_at=AGO)
    finding = degraded(node)
    Remediation.objects.create(
        node=node,
        finding=finding,
        status=Status.SUCCEEDED,
        rung=Rung.REBOOT,
        urgency=Urgency.WHEN_IDLE,
        finished=timezone.now(),
    )
    [breach] = run(C.unhandled_alerts)["unhandled_alert"].breaches
    assert breach.evidence["last_remediation"]["status"] == "succeeded"


def test_an_alert_not_seen_since_the_node_returned_to_production_is_the_loops_verdict():
    """An XID alert waits out its quiet period after the reboot that cured the GPU: not a breach."""
    node = NodeFactory(production=True, state_changed_at=AGO)
    raise_finding(
        node.pk,
        rule="xid",
        severity="catastrophic",
        summary="XID 79 fell off the bus",
        gpu_index=3,
        observed_at=AGO - timedelta(hours=1),
    )
    from health.models import Alert

    Alert.objects.filter(node=node).update(first_seen=AGO - timedelta(hours=1), last_seen=AGO - timedelta(hours=1))
    assert breaches(C.unhandled_alerts, "unhandled_alert") == []


def test_an_alert_with_an_open_remediation_is_handled():
    node = NodeFactory(production=True, state_changed_at=AGO)
    finding = degraded(node)
    Remediation.objects.create(
        node=node, finding=finding, status=Status.QUEUED, rung=Rung.REBOOT, urgency=Urgency.WHEN_IDLE
    )
    assert breaches(C.unhandled_alerts, "unhandled_alert") == []


def test_warnings_audit_findings_silenced_and_watched_alerts_are_not_breaches():
    warned, audited, silenced, watched = (NodeFactory(production=True, state_changed_at=AGO) for _ in range(4))
    raise_finding(warned.pk, rule="gpu_temperature", severity="warning", summary="warm")
    raise_finding(audited.pk, rule="audit.bmc_power", severity="catastrophic", summary="planted")
    degraded(silenced).alert.__class__.objects.filter(node=silenced).update(
        silenced_until=timezone.now() + timedelta(hours=1)
    )
    RemediationPolicy.objects.create(name="watch ib", match_rule="ib_port_down", urgency=Urgency.WATCH)
    degraded(watched, summary="mlx5_0 port 1 down", rule="ib_port_down")
    outcome = run(C.unhandled_alerts)["unhandled_alert"]
    assert (outcome.breaches, outcome.excused) == ([], 2)


def test_a_node_out_of_production_is_not_judged_on_its_alerts():
    degraded(NodeFactory(state="drain_pending", state_changed_at=AGO))
    assert breaches(C.unhandled_alerts, "unhandled_alert") == []


# --- 3. Every open remediation is alive -------------------------------------------------------------------


def remediation(node, status, **kwargs):
    return Remediation.objects.create(
        node=node, status=status, rung=Rung.REBOOT, urgency=Urgency.NOW, updated=AGO, **kwargs
    )


def test_a_running_remediation_whose_step_is_past_its_deadline_is_a_breach():
    node = NodeFactory(state="remediating", state_changed_at=AGO)
    rem = remediation(node, Status.RUNNING)
    RemediationStep.objects.create(remediation=rem, rung=Rung.REBOOT, started=AGO, deadline=AGO + timedelta(minutes=15))
    [breach] = run(C.live_remediations)["live_remediation"].breaches
    assert breach.world.startswith("step reboot running past its deadline")
    assert breach.evidence["remediation"] == rem.pk and breach.evidence["step"]["rung"] == "reboot"


def test_a_running_step_within_its_deadline_is_alive():
    rem = remediation(NodeFactory(state="remediating", state_changed_at=AGO), Status.RUNNING)
    RemediationStep.objects.create(remediation=rem, rung=Rung.REBOOT, deadline=timezone.now() + timedelta(minutes=5))
    assert breaches(C.live_remediations, "live_remediation") == []


def test_a_running_remediation_without_a_step_counts_after_the_stall_delay():
    remediation(NodeFactory(state="triage", state_changed_at=AGO), Status.RUNNING)
    assert breaches(C.live_remediations, "live_remediation", stall=timedelta(days=3)) == []
    assert len(breaches(C.live_remediations, "live_remediation", stall=timedelta(hours=1))) == 1


@pytest.mark.parametrize(
    ("status", "state", "alive"),
    [
        (Status.QUEUED, "production", True),
        (Status.AWAITING_APPROVAL, "drain_pending", True),
        (Status.DRAINING, "draining", True),
        (Status.VALIDATING, "burn_in", True),
        (Status.QUEUED, "repair", False),
        (Status.DRAINING, "production", False),
        (Status.VALIDATING, "production", False),
        (Status.VALIDATING, "triage", False),
    ],
)
def test_a_plan_waits_only_where_it_may(status, state, alive):
    remediation(NodeFactory(state=state, state_changed_at=AGO), status)
    assert (breaches(C.live_remediations, "live_remediation") == []) is alive


# --- 5. No node past its transient state's timeout ----------------------------------------------------------


def test_nodes_past_their_transient_timeouts_are_breaches(settings):
    settings.NODEWARDEN_DAY0_TIMEOUT = 2 * 3600
    settings.NODEWARDEN_AUDIT_DRAINING_HOURS = 24
    now = timezone.now()
    NodeFactory(hostname="init-late", state="initializing", state_changed_at=now - timedelta(hours=3))
    NodeFactory(hostname="init-ok", state="initializing", state_changed_at=now - timedelta(hours=1))
    NodeFactory(hostname="drain-late", state="draining", state_changed_at=now - timedelta(hours=25))
    NodeFactory(hostname="drain-ok", state="draining", state_changed_at=now - timedelta(hours=23))
    # Day 1 without an open stage run: the stage's timeout from entering it (firmware: 1 h by default).
    NodeFactory(hostname="fw-late", state="firmware_update", state_changed_at=now - timedelta(hours=2))
    NodeFactory(hostname="fw-ok", state="firmware_update", state_changed_at=now - timedelta(minutes=30))
    burn = NodeFactory(hostname="burn-late", state="burn_in", state_changed_at=now - timedelta(minutes=30))
    Run.objects.create(node=burn, kind="stage_burn_in", status="running", deadline=now - timedelta(minutes=1))
    late = NodeFactory(hostname="rem-late", state="remediating", state_changed_at=AGO)
    RemediationStep.objects.create(
        remediation=remediation(late, Status.RUNNING), rung=Rung.REBOOT, deadline=now - timedelta(minutes=1)
    )
    ok = NodeFactory(hostname="rem-ok", state="remediating", state_changed_at=AGO)
    RemediationStep.objects.create(
        remediation=remediation(ok, Status.RUNNING), rung=Rung.REBOOT, deadline=now + timedelta(minutes=10)
    )
    found = run(C.transient_timeouts)["transient_timeout"]
    assert sorted(b.hostname for b in found.breaches) == ["burn-late", "drain-late", "fw-late", "init-late", "rem-late"]
    assert found.checked == 9
    by_host = {b.hostname: b for b in found.breaches}
    assert by_host["burn-late"].evidence["stage_run"] is not None
    assert by_host["init-late"].evidence["timeout"] == "2:00:00"


def test_the_grace_gives_the_periodic_tasks_their_turn(settings):
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 600
    settings.NODEWARDEN_DAY0_TIMEOUT = 2 * 3600
    NodeFactory(state="initializing", state_changed_at=timezone.now() - timedelta(hours=2, minutes=5))
    assert breaches(C.transient_timeouts, "transient_timeout") == []
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 60
    assert len(breaches(C.transient_timeouts, "transient_timeout")) == 1
