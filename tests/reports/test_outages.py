"""Outages and their attribution, per node and per scope, on the week of conftest.py (figures by hand)."""

from __future__ import annotations

import pytest

from reports import availability, outages
from reports.choices import Attribution
from reports.filters import period_of

from .conftest import NOW, D, H

pytestmark = pytest.mark.django_db
PROVIDER, CUSTOMER = Attribution.PROVIDER, Attribution.CUSTOMER


def week_period():
    return period_of(None, NOW, 7)


def hours(seconds):
    return round(seconds / 3600, 3)


def test_each_outage_has_its_span_in_the_period_and_its_attribution(week):
    period = week_period()
    found = outages.outages(outages.Scope(), period.since, period.until)
    summary = [(o.node_id, o.started, o.ended, hours(o.seconds), o.attribution) for o in found]
    assert summary == [
        (week.a.pk, NOW - D, None, 24.0, PROVIDER),  # still in repair: counted until the period's end
        (week.c.pk, NOW - 2 * D, NOW - 2 * D + 3.5 * H, 3.5, CUSTOMER),
        # The operator asked for the drain; the system only carried it out when the job ended.
        (week.a.pk, NOW - 3 * D + H, NOW - 3 * D + 6 * H, 5.0, CUSTOMER),
        (week.a.pk, NOW - 6 * D, NOW - 6 * D + 4 * H, 4.0, PROVIDER),
        # Began before the period (inside the look-back): only its last 10 hours count.
        (week.b.pk, NOW - 8 * D, NOW - 7 * D + 10 * H, 10.0, PROVIDER),
    ]
    assert [o.initiated_by for o in found] == [
        "system:health",
        "operator",
        "operator",
        "system:remediation",
        "system:remediation",
    ]


def test_an_outage_that_went_through_repair_is_the_providers_whoever_took_the_node_out(week):
    from .conftest import change

    n = week.e
    change(n, NOW - 2 * D, "production", "draining", actor="operator", reason="looks odd")
    change(n, NOW - 2 * D + H, "draining", "triage", actor="system:followup")
    change(n, NOW - 2 * D + 2 * H, "triage", "repair", actor="operator")
    change(n, NOW - D, "repair", "firmware_update", actor="operator")
    change(n, NOW - D + H, "firmware_update", "production", actor="system:validation")
    period = week_period()
    [outage] = outages.outages(outages.Scope(node_ids=[n.pk]), period.since, period.until)
    assert outage.attribution == PROVIDER and hours(outage.seconds) == 25.0


def test_a_re_role_asked_for_by_the_customer_is_the_customers(week):
    from .conftest import change

    n = week.e
    change(n, NOW - 2 * D, "production", "drain_pending", actor="system:personas", reason="Re-role to inference")
    change(n, NOW - 2 * D + H, "drain_pending", "draining", actor="system:followup")
    change(n, NOW - 2 * D + 2 * H, "draining", "triage", actor="system:followup")
    change(n, NOW - 2 * D + 3 * H, "triage", "firmware_update", actor="system:personas")
    change(n, NOW - 2 * D + 4 * H, "firmware_update", "production", actor="system:validation")
    period = week_period()
    [outage] = outages.outages(outages.Scope(node_ids=[n.pk]), period.since, period.until)
    assert outage.attribution == CUSTOMER and hours(outage.seconds) == 3.0


def test_day_0_and_day_1_before_the_first_release_are_no_downtime(week):
    period = week_period()
    [row] = availability.node_availability(
        list(availability.with_state_at(type(week.d).objects.filter(pk=week.d.pk), period)), period
    )
    assert (hours(row.serving_s), row.downtime_s, row.incidents, row.availability_pct) == (51.0, 0, 0, 100.0)


def test_per_node_availability_counts_production_downtime_and_incidents(week):
    period = week_period()
    nodes = list(availability.with_state_at(type(week.a).objects.order_by("hostname"), period))
    rows = {r.node.hostname: r for r in availability.node_availability(nodes, period)}
    figures = {
        name: (
            hours(r.serving_s),
            hours(r.downtime_s),
            hours(r.provider_s),
            hours(r.customer_s),
            r.incidents,
            r.availability_pct,
        )
        for name, r in rows.items()
    }
    assert figures == {
        "acme-a": (135.0, 33.0, 28.0, 5.0, 3, round(100 * 135 / 168, 2)),
        "acme-b": (158.0, 10.0, 10.0, 0.0, 1, round(100 * 158 / 168, 2)),
        "acme-d": (51.0, 0.0, 0.0, 0.0, 0, 100.0),
        "acme-e": (168.0, 0.0, 0.0, 0.0, 0, 100.0),  # no history at all: in production throughout
        "globex-c": (164.5, 3.5, 0.0, 3.5, 1, round(100 * 164.5 / 168, 2)),
    }


def test_downtime_per_tenant_sums_its_nodes(week):
    period = week_period()
    rows = outages.downtime_by_attribution(outages.Scope(tenant_id=week.acme.pk), period.since, period.until)
    assert [(r["cluster_id"], r["attribution"], r["outages"], hours(r["seconds"])) for r in rows] == [
        (week.east.pk, CUSTOMER, 1, 5.0),
        (week.east.pk, PROVIDER, 3, 38.0),
    ]


def test_an_outage_that_ended_before_the_period_is_not_counted(week):
    period = period_of(None, NOW - 4 * D, 1)  # the day from -5 d to -4 d: acme-a serves throughout
    assert outages.outages(outages.Scope(node_ids=[week.a.pk]), period.since, period.until) == []
    [row] = availability.node_availability([week.a], period)
    assert hours(row.serving_s) == 24.0


def test_incidents_name_the_finding_the_remediation_acted_on_or_the_reason(week):
    period = week_period()
    found = availability.incidents(outages.outages(outages.Scope(tenant_id=week.acme.pk), period.since, period.until))
    assert [(i.hostname, i.finding["summary"] if i.finding else None, i.reason) for i in found] == [
        ("acme-a", None, "ECC storm"),
        ("acme-a", None, "customer asked for a reimage"),
        ("acme-a", "XID 79: GPU has fallen off the bus", "Remediation: XID 79"),
        ("acme-b", None, "test"),
    ]
    assert found[2].until_back == 4 * H and found[0].until_back is None
