"""The safety rails: a bad rule cannot drain a fleet. Blast-radius limits queue actions, a
findings spike trips the cluster's circuit breaker until an operator resets it, holds stop
automated actions on a node or a domain, and window-only policies wait for a window."""

from __future__ import annotations

import pytest
from django.utils import timezone

from health.services import raise_finding
from nodes.choices import NodeState
from nodes.services import Actor
from nodewarden.errors import ReasonRequired
from remediation import reconciler, services
from remediation.choices import Domain, Rung, Status, Urgency
from remediation.models import BlastRadiusLimit, CircuitBreaker, MaintenanceWindow, Remediation, RemediationPolicy

pytestmark = pytest.mark.django_db
S = NodeState


def finding(node, eager, severity="catastrophic", summary="XID 79: GPU has fallen off the bus"):
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity=severity,
            xid=79,
            subject=f"xid:{node.pk}",
            summary=summary,
            recommended_action="power_cycle",
        )
    node.refresh_from_db()
    return Remediation.objects.filter(node=node).first()


def test_the_blast_radius_limit_queues_actions_and_the_reconciler_admits_them_later(fleet, eager):
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=0.5, max_count=1, max_drains_per_hour=10)
    held_out = fleet[0]
    services.place_hold(actor=Actor.system("tests"), reason="keep it in triage", node_id=held_out.pk)
    from nodes import services as node_services

    node_services.cordon(held_out.pk, actor=Actor.system("tests"), reason="already out")  # 1 node out: the limit
    rem = finding(fleet[1], eager)
    assert rem.status == Status.QUEUED and fleet[1].state == S.PRODUCTION
    assert "blast-radius limit of the cluster: 1 of 10 nodes already out of production" in rem.queued_reason
    node_services.force_state(held_out.pk, S.PRODUCTION, actor=Actor.system("tests"), reason="back")  # room again
    with eager():
        reconciler.reconcile()
    rem.refresh_from_db()
    assert rem.status == Status.SUCCEEDED


def test_nodes_in_maintenance_count_as_out_for_the_blast_radius(fleet, eager):
    """Planned maintenance is not trouble, but its capacity is out all the same."""
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=0.5, max_count=1, max_drains_per_hour=10)
    from nodes.models import Node

    Node.objects.filter(pk=fleet[0].pk).update(state=S.MAINTENANCE)  # set up directly, as the factories do
    rem = finding(fleet[1], eager)
    assert rem.status == Status.QUEUED and fleet[1].state == S.PRODUCTION
    assert "1 of 10 nodes already out of production" in rem.queued_reason


def test_the_drain_rate_limit_counts_automated_drains_in_the_last_hour(fleet, eager):
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=1.0, max_count=100, max_drains_per_hour=2)
    done = [finding(node, eager) for node in fleet[:3]]
    assert [r.status for r in done] == [Status.SUCCEEDED, Status.SUCCEEDED, Status.QUEUED]
    assert "drain-rate limit of the cluster: 2 automated drains in the last hour" in done[2].queued_reason


def test_a_findings_spike_trips_the_breaker_and_only_an_operator_resets_it(fleet, eager, operator):
    for node in fleet[:5]:  # a bad rule: half the cluster looks broken within minutes
        finding(node, eager, severity="degraded", summary="bogus rule fired")
    breaker = CircuitBreaker.objects.get(cluster=fleet[0].cluster, reset_at__isnull=True)
    assert "5 of 10 nodes" in breaker.reason
    queued = Remediation.objects.get(status=Status.QUEUED)  # the fifth: the spike tripped it
    assert "circuit breaker tripped" in queued.queued_reason and queued.node.state == S.PRODUCTION
    with pytest.raises(ReasonRequired):
        services.reset_breaker(breaker.pk, actor=Actor(user=operator), reason="")
    services.reset_breaker(breaker.pk, actor=Actor(user=operator), reason="rule fixed, findings were false")
    with eager():
        reconciler.reconcile()
    queued.refresh_from_db()
    assert queued.status != Status.QUEUED
    with pytest.raises(services.RemediationConflict, match="already reset"):
        services.reset_breaker(breaker.pk, actor=Actor(user=operator), reason="again")


def test_a_hold_on_a_cluster_stops_automated_actions_until_released(fleet, eager, operator):
    hold = services.place_hold(actor=Actor(user=operator), reason="customer demo today", cluster_id=fleet[0].cluster_id)
    rem = finding(fleet[2], eager)
    assert rem.status == Status.QUEUED and rem.queued_reason.startswith("on hold: customer demo today")
    services.release_hold(hold.pk, actor=Actor(user=operator), reason="demo over")
    with eager():
        reconciler.reconcile()
    rem.refresh_from_db()
    assert rem.status == Status.SUCCEEDED


def test_a_window_only_policy_waits_for_a_maintenance_window(fleet, eager):
    RemediationPolicy.objects.create(
        name="xid in windows",
        match_rule="xid",
        urgency=Urgency.NOW,
        first_rung=Rung.POWER_CYCLE,
        disruptive_only_in_window=True,
    )
    hour = timezone.now().hour
    rem = finding(fleet[3], eager)
    assert rem.status == Status.QUEUED and "outside a maintenance window (none is configured)" in rem.queued_reason
    assert fleet[3].state == S.TRIAGE  # out of production at once; the disruptive rung waits
    MaintenanceWindow.objects.create(start_hour=hour, end_hour=(hour + 1) % 24)
    with eager():
        reconciler.reconcile()
    rem.refresh_from_db()
    assert rem.status == Status.SUCCEEDED
