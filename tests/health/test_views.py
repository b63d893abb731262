"""Portal pages: the alert list (filters, buttons, query bound), alert actions, the node partial."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from health.choices import AlertState, Severity
from health.models import Alert
from health.services import clear_condition, raise_finding
from tests.factories import ClusterFactory, NodeFactory


@pytest.fixture
def fleet(tenant, other_tenant):
    gpu_cluster = ClusterFactory(name="h100-east")
    acme = NodeFactory(tenant=tenant, cluster=gpu_cluster, hostname="acme-gpu-01")
    globex = NodeFactory(tenant=other_tenant, hostname="globex-gpu-01")
    raise_finding(
        acme.pk, rule="xid", severity=Severity.CATASTROPHIC, summary="XID 79 fallen off the bus", gpu_index=3, xid=79
    )
    raise_finding(globex.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU warm", gpu_index=0)
    raise_finding(
        globex.pk, rule="nvlink_down", severity=Severity.DEGRADED, summary="2 of 18 NVLinks down", gpu_index=1
    )
    clear_condition(globex.pk, rule="nvlink_down", gpu_index=1, reason="links back")
    return acme, globex


def rows(response):
    return [a.summary for a in response.context["page"].object_list]


def test_the_alert_list_shows_firing_alerts_worst_first(client, operator, fleet):
    client.force_login(operator)

    response = client.get(reverse("alert-list"))

    assert rows(response) == ["XID 79 fallen off the bus", "GPU warm"]
    assert b"Acknowledge" in response.content and b"Alerts</a>" in response.content


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"severity": "warning"}, ["GPU warm"]),
        ({"state": "resolved"}, ["2 of 18 NVLinks down"]),
        ({"state": ""}, ["XID 79 fallen off the bus", "2 of 18 NVLinks down", "GPU warm"]),
        ({"cluster": "h100-east"}, ["XID 79 fallen off the bus"]),
        ({"tenant": "globex"}, ["GPU warm"]),
        ({"acknowledged": "true"}, []),
    ],
)
def test_the_alert_list_filters_in_the_url(client, operator, fleet, query, expected):
    client.force_login(operator)

    assert rows(client.get(reverse("alert-list"), query)) == expected


def test_a_customer_sees_its_own_alerts_without_buttons_and_cannot_pick_other_tenants(client, customer, fleet):
    client.force_login(customer)

    response = client.get(reverse("alert-list"))
    probing = client.get(reverse("alert-list"), {"tenant": "globex"})

    assert rows(response) == ["XID 79 fallen off the bus"]
    assert b"/resolve/" not in response.content
    assert rows(probing) == [] and "tenant" in probing.context["errors"]


def test_the_alert_list_page_costs_the_same_for_few_and_many_alerts(
    client, operator, tenant, django_assert_max_num_queries
):
    for i in range(25):
        raise_finding(NodeFactory(tenant=tenant).pk, rule="xid", severity=Severity.WARNING, summary=f"x{i}")
    client.force_login(operator)
    client.get(reverse("alert-list"))

    # session, user, 2 x permissions, tenant membership, site/cluster/tenant choices, count, one joined page,
    # the fleet's firing count (health.counts), the page's open remediations (health.handled)
    with django_assert_max_num_queries(12):
        assert len(rows(client.get(reverse("alert-list")))) == 25
    # grouped: and one query for the page's group heads
    with django_assert_max_num_queries(13):
        assert len(rows(client.get(reverse("alert-list"), {"group": "node"}))) == 25


def test_an_operator_silences_from_the_list_and_the_alert_is_hidden(client, operator, fleet):
    client.force_login(operator)
    alert = Alert.objects.get(rule="xid")

    client.post(reverse("alert-action", args=[alert.pk, "silence"]), {"minutes": "60", "reason": "RMA booked"})

    assert Alert.objects.get(pk=alert.pk).silenced_reason == "RMA booked"
    assert rows(client.get(reverse("alert-list"))) == ["GPU warm"]


def test_an_action_without_a_reason_changes_nothing_and_says_why(client, operator, fleet):
    client.force_login(operator)
    alert = Alert.objects.get(rule="xid")

    response = client.post(reverse("alert-action", args=[alert.pk, "resolve"]), {"reason": " "}, follow=True)

    assert Alert.objects.get(pk=alert.pk).state == AlertState.FIRING
    assert "A reason is required." in response.content.decode()


def test_viewers_get_403_and_customers_404_on_other_tenants_alerts(client, viewer, customer, fleet):
    globex_alert = Alert.objects.get(rule="gpu_temperature")
    client.force_login(viewer)
    assert client.post(reverse("alert-action", args=[globex_alert.pk, "resolve"]), {"reason": "x"}).status_code == 403
    client.force_login(customer)
    assert client.post(reverse("alert-action", args=[globex_alert.pk, "resolve"]), {"reason": "x"}).status_code == 404


def test_the_node_partial_shows_open_alerts_and_recent_findings(client, customer, fleet):
    acme, globex = fleet
    client.force_login(customer)

    response = client.get(reverse("node-alerts", args=[acme.pk]))

    content = response.content.decode()
    assert "XID 79 fallen off the bus" in content and "GPU 3" in content
    assert [a.summary for a in response.context["alerts"]] == ["XID 79 fallen off the bus"]
    assert len(response.context["findings"]) == 1
    assert client.get(reverse("node-alerts", args=[globex.pk])).status_code == 404


def test_the_overview_alert_tiles_count_firing_alerts_per_severity(client, operator, fleet, django_assert_num_queries):
    client.force_login(operator)

    with django_assert_num_queries(3):  # session, user, one aggregate
        response = client.get(reverse("alert-summary"))

    counts = {t["severity"]: t["count"] for t in response.context["tiles"]}
    assert counts == {"catastrophic": 1, "degraded": 0, "warning": 1, "info": 0}
    assert response.context["firing"].total == 2
    assert b'href="/alerts/?severity=catastrophic&amp;show_silenced=true"' in response.content


def test_a_customer_sees_tiles_for_their_own_nodes_only(client, customer, fleet):
    client.force_login(customer)

    response = client.get(reverse("alert-summary"))

    assert response.context["firing"].total == 1  # acme's XID 79; globex belongs to another tenant


def test_an_alert_with_nothing_recommended_shows_a_dash_not_the_word_none(client, operator, fleet):
    acme, _ = fleet
    raise_finding(
        acme.pk,
        rule="day1_stage",
        severity=Severity.DEGRADED,
        summary="Burn-in failed: DCGM diagnostics cancelled",
        subject="burn_in",
    )  # a failed Day 1 stage recommends nothing (recommended_action "none")
    client.force_login(operator)

    for url in (reverse("alert-list"), reverse("node-alerts", args=[acme.pk])):
        cells = re.findall(r"<td>([^<]*)</td>", client.get(url).content.decode())
        assert "None" not in cells, url
        assert "—" in cells, url
