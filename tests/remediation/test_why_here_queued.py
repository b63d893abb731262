"""The node page header of a queued remediation says what it waits for (the reason its last
admission recorded) and, for a maintenance window, when the window opens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.urls import reverse

from health.services import raise_finding
from nodes.choices import NodeState
from nodes.services import Actor
from remediation import safety, services
from remediation.choices import Domain, Rung, Status, Urgency
from remediation.models import BlastRadiusLimit, MaintenanceWindow, Remediation, RemediationPolicy
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 24, 13, 53, tzinfo=UTC)  # a Tuesday


def _queued(node, eager) -> Remediation:
    with eager():
        raise_finding(
            node.pk,
            rule="xid",
            severity="catastrophic",
            xid=79,
            subject=f"xid:{node.pk}",
            summary="XID 79: GPU has fallen off the bus",
            recommended_action="power_cycle",
        )
    rem = Remediation.objects.get(node=node)
    assert rem.status == Status.QUEUED
    return rem


def _fact(client, node) -> str:
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    start = html.index('data-fact="remediation"', html.index('id="why-here"'))
    return html[start : html.index("</dd>", start)]


@pytest.fixture
def window_only(db) -> None:
    # A lone node is a whole cluster: lift the built-in 10% limit so the window is what it waits for.
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=1.0, max_count=50, max_drains_per_hour=20)
    RemediationPolicy.objects.create(
        name="xid in windows",
        match_rule="xid",
        urgency=Urgency.NOW,
        first_rung=Rung.POWER_CYCLE,
        disruptive_only_in_window=True,
    )


def test_a_remediation_waiting_for_a_window_says_so_and_when_the_window_opens(
    client, operator, customer, tenant, eager, window_only
):
    MaintenanceWindow.objects.create(weekdays=[1, 3], start_hour=22, end_hour=2)  # Tue and Thu nights
    node = NodeFactory(state=NodeState.PRODUCTION, cluster=ClusterFactory(), tenant=tenant)
    with time_machine.travel(NOW, tick=False):
        _queued(node, eager)
        client.force_login(operator)
        line = _fact(client, node)
        assert "Waiting for: disruptive rung outside a maintenance window." in line
        assert "safety limit, hold or window" not in line
        assert "The window opens 2026-11-24 22:00 UTC." in line
        assert 'datetime="2026-11-24T22:00:00+00:00"' in line  # the ETA
        client.force_login(customer)
        line = _fact(client, node)
        assert "Waiting for a safe moment to act: a maintenance window." in line
        assert "The window opens 2026-11-24 22:00 UTC." in line


def test_a_remediation_held_by_an_operator_names_the_hold_to_staff_only(client, operator, customer, tenant, eager):
    node = NodeFactory(state=NodeState.PRODUCTION, cluster=ClusterFactory(), tenant=tenant)
    services.place_hold(actor=Actor(user=operator), reason="customer demo today", node_id=node.pk)
    _queued(node, eager)
    client.force_login(operator)
    line = _fact(client, node)
    assert "Waiting for: on hold: customer demo today (operator)." in line
    client.force_login(customer)
    line = _fact(client, node)
    assert "Waiting for a safe moment to act: a hold." in line and "customer demo" not in line


def test_with_no_window_configured_it_says_an_operator_must_act(client, operator, eager, window_only):
    node = NodeFactory(state=NodeState.PRODUCTION, cluster=ClusterFactory())
    _queued(node, eager)
    client.force_login(operator)
    line = _fact(client, node)
    assert "outside a maintenance window (none is configured)" in line
    assert "No maintenance window is configured: it waits until an operator acts." in line


def test_a_remediation_over_the_blast_radius_limit_names_the_limit(client, operator, customer, tenant, eager):
    node = NodeFactory(state=NodeState.PRODUCTION, cluster=ClusterFactory(), tenant=tenant)  # 1 node: over 10%
    _queued(node, eager)
    client.force_login(operator)
    assert "Waiting for: blast-radius limit of the cluster: 0 of 1 nodes already out of production" in _fact(
        client, node
    )
    client.force_login(customer)
    assert "Waiting for a safe moment to act: a safety limit." in _fact(client, node)


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("confirming XID 79 does not clear by itself (until 13:55:00 UTC)", "a check that the problem"),
        ("circuit breaker tripped for c1: 12 findings in 10 min", "a safety limit"),
        ("drain-rate limit of the rack: 20 automated drains in the last hour (limit 20)", "a safety limit"),
    ],
)
def test_a_customer_reads_each_kind_of_wait_in_plain_words(reason, kind):
    assert safety.wait_kind(reason).startswith(kind)
