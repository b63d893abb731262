"""Remediation pages: the node's panel (the ladder, the decisions, what the customer is told,
the operator's approve, skip and stop), and the fleet page (open work, breakers, holds, MTTR,
availability) for staff. Rows are built directly; the engine is tested in test_ladder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from health.models import Finding
from nodes.choices import NodeState
from nodes.models import StateCountSnapshot
from remediation import charts, summary
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import CircuitBreaker, Hold, Remediation, RemediationStep
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db
S = NodeState
FIRST_DECISION = (
    "XID 79: GPU has fallen off the bus -> default for catastrophic findings; cordon and act now; "
    "first rung gpu reset (recommended action: reset_gpu)"
)


def finding_on(node, *, at=None, summary="XID 79: GPU has fallen off the bus"):
    at = at or timezone.now()
    return Finding.objects.create(
        node=node,
        hostname=node.hostname,
        rule="xid",
        xid=79,
        severity="catastrophic",
        summary=summary,
        subject="xid:79",
        observed_at=at,
        created=at,
    )


def remediation_on(
    node, *, status=Status.RUNNING, rung=Rung.POWER_CYCLE, created=None, finished=None, with_finding=True, **kwargs
):
    """A remediation as the engine leaves it: a finding, two decisions, a failed GPU reset and the
    rung in hand (running when the remediation runs)."""
    created = created or timezone.now() - timedelta(minutes=20)
    finding = finding_on(node, at=created) if with_finding else None
    decisions = [
        {
            "at": created.isoformat(),
            "what": FIRST_DECISION,
            "who": "system:remediation",
            **({"finding": finding.pk} if finding else {}),
        },
        {
            "at": (created + timedelta(minutes=1)).isoformat(),
            "who": "system:remediation",
            "what": "gpu reset failed: GPU reset needs the node agent's command channel; climbing to bmc power cycle",
        },
    ]
    rem = Remediation.objects.create(
        node=node,
        finding=finding,
        status=status,
        rung=rung,
        urgency=Urgency.NOW,
        created=created,
        updated=created,
        finished=finished,
        decisions=decisions,
        **kwargs,
    )
    if rung != Rung.GPU_RESET:
        RemediationStep.objects.create(
            remediation=rem,
            rung=Rung.GPU_RESET,
            status=StepStatus.FAILED,
            started=created,
            finished=created + timedelta(minutes=1),
            deadline=created + timedelta(minutes=5),
            detail="reset_gpu #7 (GPU 3) failed: busy: 1 processes",
        )
    if status == Status.RUNNING:
        RemediationStep.objects.create(
            remediation=rem, rung=rung, started=created + timedelta(minutes=1), deadline=created + timedelta(minutes=16)
        )
    return rem


def panel(client, user, node):
    client.force_login(user)
    return client.get(reverse("node-remediation", args=[node.pk]))


# --- The node's panel ----------------------------------------------------------------------------


def test_the_panel_shows_every_rung_the_current_one_the_tried_ones_and_the_decisions(client, operator):
    node = NodeFactory(state=S.REMEDIATING)
    remediation_on(node)
    html = panel(client, operator, node).content.decode()
    assert html.count("<tr data-rung=") == 6
    assert (
        'data-rung="gpu_reset" data-step="failed"' in html and "reset_gpu #7 (GPU 3) failed: busy: 1 processes" in html
    )
    assert 'data-rung="power_cycle" data-step="running" class="current"' in html
    assert 'data-rung="reimage" data-step="untried"' in html
    assert "XID 79: GPU has fallen off the bus" in html  # the finding
    assert "first rung gpu reset (recommended action: reset_gpu)" in html and "climbing to bmc power cycle" in html
    assert "Being repaired: bmc power cycle." in html
    assert 'data-action="skip-rung"' in html and 'data-action="stop"' in html and 'data-action="approve"' not in html


def test_a_node_never_remediated_says_so(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    html = panel(client, operator, node).content.decode()
    assert "No remediation on record" in html and "remediation-actions" not in html


def test_a_customer_sees_what_happened_on_their_node_read_only(client, customer, tenant, other_tenant):
    mine = NodeFactory(state=S.TRIAGE, tenant=tenant)
    remediation_on(mine, status=Status.QUEUED, queued_reason="on hold: rack work (operator)")
    response = panel(client, customer, mine)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Waiting for a safe moment to act" in html and "first rung gpu reset" in html
    assert "remediation-actions" not in html and "Policy" not in html
    theirs = NodeFactory(state=S.TRIAGE, tenant=other_tenant)
    remediation_on(theirs)
    assert panel(client, customer, theirs).status_code == 404


def test_a_finished_remediation_says_when_it_ended_and_lists_older_ones(client, customer, tenant):
    node = NodeFactory(state=S.PRODUCTION, tenant=tenant)
    start = timezone.now() - timedelta(days=20)
    for i in range(12):
        Remediation.objects.create(
            node=node,
            status=Status.SUCCEEDED,
            rung=Rung.REBOOT,
            urgency=Urgency.NOW,
            created=start + timedelta(days=i),
            finished=start + timedelta(days=i, hours=1),
        )
    ended = datetime(2031, 3, 4, 5, 6, tzinfo=UTC)
    remediation_on(node, status=Status.SUCCEEDED, created=ended - timedelta(hours=2), finished=ended)
    html = panel(client, customer, node).content.decode()
    assert "Back in production since 2031-03-04 05:06 UTC." in html
    assert html.count('<tr data-status="succeeded">') == summary.OLDER == 10


def test_the_panel_reads_a_bounded_number_of_queries(client, operator):
    def queries(older: int) -> int:
        node = NodeFactory(state=S.REMEDIATING)
        for i in range(older):
            Remediation.objects.create(
                node=node,
                status=Status.STOPPED,
                rung=Rung.REBOOT,
                urgency=Urgency.NOW,
                created=timezone.now() - timedelta(days=i + 1),
                finding=finding_on(node),
            )
        remediation_on(node)
        client.force_login(operator)
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("node-remediation", args=[node.pk])).status_code == 200
        return len(ctx)

    assert queries(3) == queries(30)


# --- The operator's verbs on the panel -----------------------------------------------------------


def act(client, user, rem, verb, reason="checked the node", **kwargs):
    client.force_login(user)
    return client.post(reverse("remediation-action", args=[rem.pk, verb]), {"reason": reason}, **kwargs)


def test_an_operator_approves_and_the_reason_is_kept(client, operator):
    rem = remediation_on(NodeFactory(state=S.PRODUCTION), status=Status.AWAITING_APPROVAL, rung=Rung.REBOOT)
    response = act(client, operator, rem, "approve", "vendor says a reboot clears it")
    assert response.status_code == 302 and response.url == reverse("node-detail", args=[rem.node_id])
    rem.refresh_from_db()
    assert rem.status != Status.AWAITING_APPROVAL
    assert {"what": "approved: vendor says a reboot clears it", "who": "operator"}.items() <= rem.decisions[2].items()


def test_an_operator_skips_the_rung_and_the_ladder_climbs(client, operator):
    rem = remediation_on(NodeFactory(state=S.TRIAGE))
    act(client, operator, rem, "skip-rung", "power cycles never help this board")
    rem.refresh_from_db()
    assert rem.rung == Rung.REIMAGE
    assert rem.steps.get(rung=Rung.POWER_CYCLE).status == StepStatus.SKIPPED


def test_an_operator_stops_and_a_second_stop_is_refused_with_a_message(client, operator):
    rem = remediation_on(NodeFactory(state=S.TRIAGE))
    act(client, operator, rem, "stop", "taking it to the lab")
    rem.refresh_from_db()
    assert rem.status == Status.STOPPED
    html = act(client, operator, rem, "stop", "again", follow=True).content.decode()
    assert "is already stopped by an operator" in html


def test_a_blank_reason_is_refused_with_a_message(client, operator):
    rem = remediation_on(NodeFactory(state=S.TRIAGE))
    html = act(client, operator, rem, "stop", "  ", follow=True).content.decode()
    assert "A reason is required." in html
    rem.refresh_from_db()
    assert rem.status == Status.RUNNING


def test_viewers_and_customers_may_not_act_and_other_tenants_do_not_exist(
    client, viewer, customer, tenant, other_tenant
):
    rem = remediation_on(NodeFactory(state=S.TRIAGE, tenant=tenant))
    assert act(client, viewer, rem, "stop").status_code == 403
    assert act(client, customer, rem, "stop").status_code == 403
    theirs = remediation_on(NodeFactory(state=S.TRIAGE, tenant=other_tenant))
    assert act(client, customer, theirs, "stop").status_code == 404
    assert act(client, viewer, rem, "reboot-everything").status_code == 404
    rem.refresh_from_db()
    assert rem.status == Status.RUNNING


# --- The fleet page ------------------------------------------------------------------------------


def overview(client, user, query=""):
    client.force_login(user)
    return client.get(reverse("remediation-overview") + query)


def test_the_fleet_page_counts_open_work_and_lists_breakers_holds_and_open_remediations(client, operator):
    cluster = ClusterFactory(name="h100-east")
    queued = remediation_on(
        NodeFactory(hostname="gpu-q-01", cluster=cluster, state=S.PRODUCTION),
        status=Status.QUEUED,
        queued_reason="blast-radius limit of the cluster: 3 of 20 out",
    )
    remediation_on(NodeFactory(hostname="gpu-r-01", state=S.REMEDIATING))
    remediation_on(
        NodeFactory(hostname="gpu-done-01", state=S.PRODUCTION), status=Status.SUCCEEDED, finished=timezone.now()
    )
    CircuitBreaker.objects.create(cluster=cluster, reason="6 of 20 nodes had findings within 10 min")
    Hold.objects.create(cluster=cluster, reason="firmware roll-out", actor_name="operator")
    response = overview(client, operator)
    html = response.content.decode()
    assert response.status_code == 200
    by_status = {t["status"]: t["count"] for t in response.context["by_status"]}
    by_rung = {t["rung"]: t["count"] for t in response.context["by_rung"]}
    assert (by_status[Status.QUEUED], by_status[Status.RUNNING], by_rung[Rung.POWER_CYCLE]) == (1, 1, 2)
    assert "6 of 20 nodes had findings" in html and "firmware roll-out" in html
    rows = [r.pk for r in response.context["page"].object_list]
    assert len(rows) == 2 and queued.pk in rows  # the succeeded one is not open
    assert "blast-radius limit of the cluster: 3 of 20 out" in html and "gpu-done-01" not in html
    assert [r.node.hostname for r in overview(client, operator, "?status=succeeded").context["page"]] == ["gpu-done-01"]


def test_the_fleet_page_renders_empty(client, viewer):
    response = overview(client, viewer)
    html = response.content.decode()
    assert response.status_code == 200
    assert "No circuit breaker is tripped" in html and "No active hold." in html and "No remediation matches." in html
    assert "place-hold" not in html  # a viewer looks, does not act


def test_the_fleet_page_is_staff_only(client, customer):
    assert overview(client, customer).status_code == 404


def test_the_fleet_page_reads_a_bounded_number_of_queries(client, operator):
    def queries(rows: int) -> int:
        for _ in range(rows):
            remediation_on(NodeFactory(state=S.REMEDIATING))
        client.force_login(operator)
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("remediation-overview")).status_code == 200
        Remediation.objects.all().delete()
        return len(ctx)

    assert queries(3) == queries(30)


def test_holds_are_placed_and_released_and_breakers_reset_from_the_fleet_page(client, operator):
    cluster = ClusterFactory(name="a100-west")
    node = NodeFactory(hostname="gpu-hold-01", state=S.PRODUCTION)
    client.force_login(operator)
    place = reverse("remediation-hold-place")
    client.post(place, {"hostname": "gpu-hold-01", "reason": "chassis swap tonight"})
    client.post(place, {"cluster": "a100-west", "reason": "scheduler upgrade"})
    html = client.post(
        place, {"hostname": "gpu-hold-01", "cluster": "a100-west", "reason": "x"}, follow=True
    ).content.decode()
    assert "one of the two" in html
    held = Hold.objects.order_by("id")
    assert [(h.node, h.cluster, h.actor_name) for h in held] == [(node, None, "operator"), (None, cluster, "operator")]
    client.post(reverse("remediation-hold-release", args=[held[0].pk]), {"reason": "swap done"})
    assert Hold.objects.get(pk=held[0].pk).released_reason == "operator: swap done"
    breaker = CircuitBreaker.objects.create(cluster=cluster, reason="spike")
    html = client.post(
        reverse("remediation-breaker-reset", args=[breaker.pk]), {"reason": ""}, follow=True
    ).content.decode()
    assert "A reason is required." in html
    client.post(reverse("remediation-breaker-reset", args=[breaker.pk]), {"reason": "a bad rule, fixed"})
    breaker.refresh_from_db()
    assert (breaker.reset_by, breaker.reset_reason) == ("operator", "a bad rule, fixed")


def test_a_viewer_may_not_place_holds_or_reset_breakers(client, viewer):
    breaker = CircuitBreaker.objects.create(cluster=ClusterFactory(), reason="spike")
    client.force_login(viewer)
    assert (
        client.post(reverse("remediation-hold-place"), {"cluster": breaker.cluster.name, "reason": "x"}).status_code
        == 403
    )
    assert client.post(reverse("remediation-breaker-reset", args=[breaker.pk]), {"reason": "x"}).status_code == 403
    assert not Hold.objects.exists()


# --- MTTR and availability -----------------------------------------------------------------------


def recovered(cluster, hours, *, finding_minutes_before=0, days_ago=1, status=Status.SUCCEEDED):
    """A remediation that ended ``days_ago`` after ``hours`` from its finding."""
    finished = timezone.now() - timedelta(days=days_ago)
    began = finished - timedelta(hours=hours)
    node = NodeFactory(cluster=cluster, state=S.PRODUCTION)
    finding = finding_on(node, at=began)
    return Remediation.objects.create(
        node=node,
        finding=finding,
        status=status,
        rung=Rung.REBOOT,
        urgency=Urgency.NOW,
        created=began + timedelta(minutes=finding_minutes_before),
        finished=finished,
    )


def test_mttr_is_the_median_and_90th_percentile_from_finding_to_production_per_cluster(client, operator):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    recovered(east, 1, finding_minutes_before=30)  # the clock starts at the finding, not the remediation
    for hours in (2, 3, 4):
        recovered(east, hours)
    recovered(west, 10)
    recovered(west, 50, days_ago=31)  # outside the window
    recovered(west, 50, status=Status.STOPPED)  # not a recovery
    result = summary.mttr(Remediation.objects.all())
    assert result["overall"]["count"] == 5
    assert result["overall"]["median_s"] == 3 * 3600
    assert result["overall"]["p90_s"] == pytest.approx(7.6 * 3600)  # 4 h + 0.6 * (10 h - 4 h)
    by_cluster = {c["cluster"]: c for c in result["clusters"]}
    assert by_cluster["east"]["median_s"] == 2.5 * 3600 and by_cluster["east"]["p90_s"] == pytest.approx(3.7 * 3600)
    assert (by_cluster["west"]["count"], by_cluster["west"]["median"], by_cluster["west"]["p90"]) == (
        1,
        "10.0 h",
        "10.0 h",
    )
    html = overview(client, operator).content.decode()
    assert '<td class="num">3.0 h</td><td class="num">7.6 h</td>' in html


def test_mttr_with_nothing_recovered_is_blank():
    assert summary.mttr(Remediation.objects.all())["overall"] == {
        "count": 0,
        "median_s": None,
        "p90_s": None,
        "median": "—",
        "p90": "—",
    }


def test_availability_is_the_share_of_a_clusters_nodes_in_production_per_day(client, operator):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    day1 = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    day2 = day1 + timedelta(days=1)

    def snap(at, cluster, state, count):
        StateCountSnapshot.objects.create(taken_at=at, cluster=cluster, state=state, count=count)

    snap(day1, east, S.PRODUCTION, 7)
    snap(day1, east, S.DRAIN_PENDING, 1)  # still serving
    snap(day1, east, S.TRIAGE, 2)
    snap(day1 + timedelta(hours=1), east, S.PRODUCTION, 10)
    snap(day2, east, S.PRODUCTION, 5)
    snap(day2, east, S.REMEDIATING, 5)
    snap(day2, east, S.DECOMMISSIONED, 3)  # no longer the cluster's
    snap(day1, west, S.PRODUCTION, 4)
    snap(day1, None, S.ENROLLED, 9)  # not in a cluster: not drawn
    figure = charts.availability_by_cluster(StateCountSnapshot.objects.all())
    lines = {trace["name"]: (trace["x"], trace["y"]) for trace in figure["data"]}
    assert lines == {
        "east": ([day1.date().isoformat(), day2.date().isoformat()], [90.0, 50.0]),
        "west": ([day1.date().isoformat()], [100.0]),
    }
    html = overview(client, operator).content.decode()
    assert 'id="availability-chart-data"' in html and '"name": "east"' in html


# --- Admin ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "remediationpolicy",
        "remediation",
        "remediationstep",
        "hold",
        "maintenancewindow",
        "blastradiuslimit",
        "circuitbreaker",
    ],
)
def test_the_admin_lists_render(client, fleet_admin, model):
    remediation_on(NodeFactory(state=S.REMEDIATING))
    client.force_login(fleet_admin)
    assert client.get(reverse(f"admin:remediation_{model}_changelist")).status_code == 200


def test_the_admin_resets_a_breaker_only_with_a_reason(client, fleet_admin):
    breaker = CircuitBreaker.objects.create(cluster=ClusterFactory(), reason="spike")
    client.force_login(fleet_admin)
    url = reverse("admin:remediation_circuitbreaker_changelist")
    form = {"action": "reset_action", "_selected_action": [breaker.pk]}
    asked = client.post(url, form)
    assert asked.status_code == 200 and "Reset circuit breakers" in asked.content.decode()
    client.post(url, {**form, "apply": "1", "reason": "a bad rule, fixed"})
    breaker.refresh_from_db()
    assert (breaker.reset_by, breaker.reset_reason) == ("fleetadmin", "a bad rule, fixed")


def test_a_hold_added_in_the_admin_goes_through_the_service(client, fleet_admin):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(fleet_admin)
    response = client.post(
        reverse("admin:remediation_hold_add"), {"node": node.pk, "reason": "bench test", "until_0": "", "until_1": ""}
    )
    assert response.status_code == 302
    hold = Hold.objects.get()
    assert (hold.node, hold.actor_name) == (node, "fleetadmin")
    assert node.events.filter(reason="Hold placed: bench test").exists()
