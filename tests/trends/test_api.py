"""The trends API: GET /api/trends/flags/ (filters kind, node, open) and GET /api/trends/lemons/,
staff only (customers 404), read-only."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from nodes.models import Node
from trends import services
from trends.choices import FlagKind
from trends.models import TrendFlag

from .conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(viewer):
    client = APIClient()
    client.force_authenticate(viewer)
    return client


@pytest.fixture
def evaluated(fleet):
    services.evaluate(now=NOW)
    return fleet


def test_it_lists_flags_with_their_evidence(api, evaluated):
    body = api.get("/api/trends/flags/").json()
    assert body["count"] == 4
    row = next(r for r in body["results"] if r["kind"] == "lemon")
    assert row["hostname"] == evaluated.lemon.hostname and row["hardware_profile"] == "trend-h100"
    assert row["open"] is True and row["evidence"]["signals"]["incidents"] == 6 and row["finding"]


@pytest.mark.parametrize(
    ("query", "count"),
    [("kind=underperformer", 2), ("kind=degrading", 1), ("kind=lemon", 1), ("open=true", 4), ("open=false", 0)],
)
def test_it_filters_flags(api, evaluated, query, count):
    assert api.get(f"/api/trends/flags/?{query}").json()["count"] == count


def test_it_filters_by_node(api, evaluated):
    body = api.get(f"/api/trends/flags/?node={evaluated.degrader.pk}").json()
    assert {r["kind"] for r in body["results"]} == {"degrading", "underperformer"}


def test_cleared_flags_are_listed_when_asked_for(api, evaluated):
    TrendFlag.objects.filter(kind=FlagKind.LEMON).update(cleared_at=NOW)
    body = api.get("/api/trends/flags/?open=false").json()
    assert [r["kind"] for r in body["results"]] == ["lemon"] and body["results"][0]["open"] is False


def test_a_bad_filter_is_a_400(api, evaluated):
    assert api.get("/api/trends/flags/?kind=banana").status_code == 400


def test_lemons_are_the_last_runs_top_offenders(api, evaluated):
    body = api.get("/api/trends/lemons/").json()
    assert body["threshold"] == 40 and body["window_days"] == 30 and body["weights"]["incidents"] == 3
    top = body["results"][0]
    assert top["hostname"] == evaluated.lemon.hostname and top["flagged"] is True
    assert top["signals"]["xids"] == 9 and top["score"] == pytest.approx(sum(top["contributions"].values()), abs=0.05)
    assert not any(r["flagged"] for r in body["results"][1:])


def test_lemons_before_any_evaluation_is_an_empty_report(api, db):
    assert api.get("/api/trends/lemons/").json() == {
        "run": None,
        "evaluated_at": None,
        "window_days": 30,
        "threshold": 40.0,
        "weights": pytest.approx(api.get("/api/trends/lemons/").json()["weights"]),
        "results": [],
    }


@pytest.mark.parametrize("path", ["/api/trends/flags/", "/api/trends/lemons/"])
def test_customers_are_told_they_do_not_exist(customer, tenant, evaluated, path):
    Node.objects.filter(pk=evaluated.lemon.pk).update(tenant=tenant)
    client = APIClient()
    client.force_authenticate(customer)
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("path", ["/api/trends/flags/", "/api/trends/lemons/"])
def test_anonymous_callers_are_refused(db, path):
    assert APIClient().get(path).status_code in (401, 403)


def test_flags_are_read_only(api, evaluated):
    assert api.post("/api/trends/flags/", {}).status_code == 405


def test_the_flag_list_query_count_is_flat(api, evaluated):
    with CaptureQueriesContext(connection) as ctx:
        api.get("/api/trends/flags/")
    assert len(ctx) <= 3  # count, the page of flags with node and profile joined
