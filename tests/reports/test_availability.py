"""A tenant's availability page, its CSV files and the API: figures on the week of conftest.py,
and scoping (a customer sees their own tenant; anything else answers 404)."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from .conftest import NOW, D

pytestmark = pytest.mark.django_db
URL = "/reports/availability/"


def rows(html):
    return dict(re.findall(r'<tr data-node="(\d+)">.*?data-availability="([^"]*)"', html, re.DOTALL))


def test_a_customer_sees_their_own_nodes_availability_and_incidents(client, week, acme_user, frozen):
    client.force_login(acme_user)
    html = client.get(URL, {"days": 7}).content.decode()
    assert rows(html) == {
        str(week.a.pk): "80.36",
        str(week.b.pk): "94.05",
        str(week.d.pk): "100.0",
        str(week.e.pk): "100.0",
    }
    assert "globex-c" not in html
    incidents = re.findall(r'<tr data-node="(\d+)" data-attribution="(\w+)">', html)
    assert incidents == [
        (str(week.a.pk), "provider"),
        (str(week.a.pk), "customer"),
        (str(week.a.pk), "provider"),
        (str(week.b.pk), "provider"),
    ]
    assert "XID 79: GPU has fallen off the bus" in html and "not back yet" in html and "4.0 h" in html
    assert re.search(
        r'<tr data-attribution="provider"><td>[^<]+</td><td class="num">3</td><td class="num">38.0</td>', html
    )
    assert re.search(
        r'<tr data-attribution="customer"><td>[^<]+</td><td class="num">1</td><td class="num">5.0</td>', html
    )


def test_the_incident_list_is_paged_and_a_page_past_the_end_shows_the_last(client, week, acme_user, frozen, settings):
    from reports import views

    client.force_login(acme_user)
    original = views.PAGE_SIZE
    views.PAGE_SIZE = 3
    try:
        first = client.get(URL, {"days": 7}).content.decode()
        last = client.get(URL, {"days": 7, "ipage": 9}).content.decode()
    finally:
        views.PAGE_SIZE = original
    assert len(re.findall(r'<tr data-node="\d+" data-attribution=', first)) == 3
    assert re.findall(r'<tr data-node="(\d+)" data-attribution=', last) == [str(week.b.pk)]
    assert "Page 2 of 2" in last and 'class="num">3</td><td class="num">38.0</td>' in last


def test_a_customer_asking_for_another_tenant_gets_404(client, week, acme_user):
    client.force_login(acme_user)
    assert client.get(URL, {"tenant": "globex"}).status_code == 404
    assert client.get(URL, {"tenant": "no-such"}).status_code == 404
    assert client.get(reverse("report-availability-csv"), {"tenant": "globex"}).status_code == 404
    assert client.get(reverse("report-incidents-csv"), {"tenant": "globex"}).status_code == 404


def test_a_user_without_a_tenant_gets_404_and_strangers_log_in(client, week):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="nobody"))
    assert client.get(URL).status_code == 404
    client.logout()
    assert client.get(URL).status_code == 302


def test_staff_pick_a_tenant(client, operator, week, frozen):
    client.force_login(operator)
    picker = client.get(URL).content.decode()
    assert 'id="tenant-picker"' in picker and 'value="globex"' in picker
    html = client.get(URL, {"days": 7, "tenant": "globex"}).content.decode()
    assert rows(html) == {str(week.c.pk): "97.92"}


def test_the_csv_files_hold_the_same_figures(client, week, acme_user, frozen):
    client.force_login(acme_user)
    response = client.get(reverse("report-availability-csv"), {"days": 7})
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [
        (
            r["hostname"],
            r["production_hours"],
            r["downtime_hours"],
            r["provider_downtime_hours"],
            r["incidents"],
            r["availability_pct"],
        )
        for r in table
    ] == [
        ("acme-a", "135.00", "33.00", "28.00", "3", "80.36"),
        ("acme-b", "158.00", "10.00", "10.00", "1", "94.05"),
        ("acme-d", "51.00", "0.00", "0.00", "0", "100.0"),
        ("acme-e", "168.00", "0.00", "0.00", "0", "100.0"),
    ]
    response = client.get(reverse("report-incidents-csv"), {"days": 7})
    incidents = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["hostname"], r["hours_until_back"], r["attribution"], r["finding"]) for r in incidents] == [
        ("acme-a", "", "provider", ""),
        ("acme-a", "5.00", "customer", ""),
        ("acme-a", "4.00", "provider", "XID 79: GPU has fallen off the bus"),
        ("acme-b", "34.00", "provider", ""),
    ]


# --- API -----------------------------------------------------------------------------------------


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_gives_each_node_with_its_incidents(week, acme_user, frozen):
    since = (NOW - 7 * D).isoformat()
    body = api(acme_user).get("/api/reports/availability/", {"since": since}).json()
    assert body["tenant"] == "acme" and body["count"] == 4
    a = next(r for r in body["results"] if r["hostname"] == "acme-a")
    assert (
        a["production_hours"],
        a["downtime_hours"],
        a["provider_downtime_hours"],
        a["customer_downtime_hours"],
        a["incident_count"],
        a["availability_pct"],
    ) == (135.0, 33.0, 28.0, 5.0, 3, 80.36)
    assert [(i["hours_until_back"], i["attribution"], i["initiated_by"]) for i in a["incidents"]] == [
        (None, "provider", "system:health"),
        (5.0, "customer", "operator"),
        (4.0, "provider", "system:remediation"),
    ]
    assert a["incidents"][2]["finding"]["summary"] == "XID 79: GPU has fallen off the bus"
    page = api(acme_user).get("/api/reports/availability/", {"since": since, "limit": 2, "offset": 2}).json()
    assert [r["hostname"] for r in page["results"]] == ["acme-d", "acme-e"] and page["previous"]


def test_the_api_is_scoped_like_the_pages(week, acme_user, operator, frozen):
    assert api(acme_user).get("/api/reports/availability/", {"tenant": "globex"}).status_code == 404
    everyone = api(operator).get("/api/reports/availability/", {"days": 7}).json()
    assert everyone["tenant"] is None and everyone["count"] == 5
    assert (
        api(operator)
        .get("/api/reports/availability/", {"since": "2025-07-01T00:00:00Z", "until": "2025-06-01T00:00:00Z"})
        .status_code
        == 400
    )


def test_the_flow_api_counts_the_callers_changes(week, acme_user, operator, frozen):
    since = (NOW - 7 * D).isoformat()
    mine = api(acme_user).get("/api/reports/flows/", {"since": since}).json()
    assert mine["total"] == 20  # acme-a 11, acme-b 1, acme-d 8: not globex-c's 4
    everything = api(operator).get("/api/reports/flows/", {"since": since}).json()
    assert everything["total"] == 24
    assert {"source": "production", "target": "triage", "count": 2} in everything["flows"]
    assert api(acme_user).get("/api/reports/flows/", {"tenant": "globex"}).status_code == 404
    west = api(operator).get("/api/reports/flows/", {"since": since, "cluster": "c-west"}).json()
    assert west["total"] == 4
