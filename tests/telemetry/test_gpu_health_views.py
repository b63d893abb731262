"""The node page's GPU health partial, its charts, and the read API, with tenant scoping."""

from __future__ import annotations

import json
from datetime import timedelta

import msgspec
import pytest
import time_machine
from django.urls import reverse
from rest_framework.test import APIClient

from telemetry.charts import figure_points, gpu_figures
from telemetry.ingest import ingest_reports
from telemetry.schema import AgentReport
from telemetry.series import MAX_POINTS_PER_FIGURE, gpu_series
from telemetry.testing import make_batch, make_report
from tests.factories import NodeFactory

from .conftest import T0

pytestmark = pytest.mark.django_db


def send(node, reports):
    ingest_reports(node.pk, [msgspec.convert(r, AgentReport) for r in reports])


def partial(client, node, **params):
    return client.get(reverse("node-gpu-health", args=[node.pk]), params)


@pytest.fixture
def reporting(node):
    """A node whose GPU 4 runs hot with an uncorrectable ECC error, 10 reports over 5 minutes."""
    reports = make_batch(node.hostname, start=T0, count=10)["reports"]
    last = reports[-1]
    last["gpus"][4].update(temperature_c=88.0, ecc_volatile_uncorrected=1)
    last["gpus"][5].update(nvlink_links_up=16, pcie_link_gen=4)
    send(node, reports)
    return node


def test_it_says_so_when_a_node_never_reported(client, operator, node):
    client.force_login(operator)
    response = partial(client, node)
    assert response.status_code == 200
    assert "never reported" in response.content.decode()


def test_it_shows_the_heartbeat_age_versions_and_a_row_per_gpu(client, operator, reporting):
    client.force_login(operator)
    with time_machine.travel(T0 + timedelta(seconds=270 + 12), tick=False):
        response = partial(client, reporting)
    html = response.content.decode()
    assert "12 s ago" in html
    assert "580.105.08" in html and "13.0" in html
    assert len(response.context["gpus"]) == 8
    flags = {row.gpu.index: row.flags for row in response.context["gpus"]}
    assert flags[4] == {"temperature", "ecc"}
    assert flags[5] == {"nvlink", "pcie"}
    assert flags[0] == set()
    assert "mlx5_0/1 ACTIVE" in html


def test_it_draws_temperature_power_and_ecc_figures_from_the_samples(client, operator, reporting):
    client.force_login(operator)
    with time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        response = partial(client, reporting, window="1h")
    figures = {f["id"]: f["figure"] for f in response.context["figures"]}
    assert set(figures) == {"gpu-temperature", "gpu-power", "gpu-ecc"}
    temperature = figures["gpu-temperature"]["data"]
    gpu4 = next(t for t in temperature if t["name"] == "GPU 4")
    assert max(gpu4["y"]) == 88.0
    ecc4 = next(t for t in figures["gpu-ecc"]["data"] if t["name"] == "GPU 4 uncorrected")
    assert max(ecc4["y"]) == 1
    assert len(figures["gpu-power"]["data"]) == 8
    html = response.content.decode()
    assert 'data-figure="gpu-power-data"' in html and 'id="gpu-power-data"' in html
    assert "<script>" not in html  # static/js/portal.js draws it after the swap: the CSP allows no inline script


def test_it_refuses_an_unknown_window(client, operator, reporting):
    client.force_login(operator)
    response = partial(client, reporting, window="3y")
    assert response.status_code == 400
    assert "1h" in response.content.decode()


def test_a_week_of_samples_is_downsampled_to_the_figure_budget(node):
    # 7 days every 5 minutes = 2,016 reports x 8 GPUs; undownsampled, 32,256 points per figure.
    start = T0 - timedelta(days=7)
    for day in range(7):
        send(
            node,
            make_batch(node.hostname, start=start + timedelta(days=day), count=288, every_s=300, seed=day * 1000)[
                "reports"
            ],
        )
    series = gpu_series(node.pk, since=start, until=T0, gpu_count=8)
    for figure in gpu_figures(series).values():
        assert 0 < figure_points(figure) <= MAX_POINTS_PER_FIGURE
    assert sum(row["n"] for row in series.gpus[0]) == 2016  # every sample counted in some bucket


def test_a_customer_sees_their_own_nodes_gpu_health_and_not_others(client, customer, tenant, other_tenant):
    mine = NodeFactory(hostname="acme-001", tenant=tenant)
    theirs = NodeFactory(hostname="globex-001", tenant=other_tenant)
    send(mine, [make_report(mine.hostname, collected_at=T0)])
    send(theirs, [make_report(theirs.hostname, collected_at=T0)])
    client.force_login(customer)
    assert partial(client, mine).status_code == 200
    assert partial(client, theirs).status_code == 404
    api = APIClient()
    api.force_authenticate(customer)
    assert api.get(f"/api/nodes/{mine.pk}/gpu-health/").status_code == 200
    assert api.get(f"/api/nodes/{theirs.pk}/gpu-health/").status_code == 404
    assert api.get(f"/api/nodes/{theirs.pk}/gpu-samples/").status_code == 404


def test_the_partial_needs_a_login(client, node):
    assert partial(client, node).status_code == 302


# --- Read API --------------------------------------------------------------------------
@pytest.fixture
def api(operator):
    client = APIClient()
    client.force_authenticate(operator)
    return client


def test_the_gpu_health_api_returns_latest_state_and_gpus(api, reporting):
    data = api.get(reverse("api:node-gpu-health", args=[reporting.pk])).json()
    assert data["hostname"] == reporting.hostname
    assert data["health"]["gpu_count"] == 8 and data["health"]["source"] == "agent"
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert data["gpus"][4]["ecc_volatile_uncorrected"] == 1


def test_the_gpu_health_api_of_a_silent_node_has_no_health(api, node):
    data = api.get(reverse("api:node-gpu-health", args=[node.pk])).json()
    assert data["health"] is None and data["gpus"] == []


def test_the_samples_api_returns_bucketed_series_for_one_gpu(api, reporting):
    url = reverse("api:node-gpu-samples", args=[reporting.pk])
    data = api.get(url, {"gpu": 4, "since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()}).json()
    assert [g["index"] for g in data["gpus"]] == [4]
    points = data["gpus"][0]["points"]
    assert sum(p["n"] for p in points) == 10
    assert max(p["temperature_max"] for p in points) == 88.0
    assert data["bucket_s"] >= 1


def test_the_samples_api_gives_readings_as_sent_not_as_4_byte_floats(api, node):
    # Readings are stored as real: an average of 312.7 W read back as 312.70001220703125 (PostgreSQL).
    reports = make_batch(node.hostname, start=T0, count=4)["reports"]
    for report in reports:
        report["gpus"][4].update(power_w=312.7, utilization_pct=61.3, temperature_c=71.1)
    send(node, reports)
    url = reverse("api:node-gpu-samples", args=[node.pk])
    data = api.get(url, {"gpu": 4, "since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()}).json()
    (point,) = [p for p in data["gpus"][0]["points"] if p["n"]][:1]
    assert (point["power_avg"], point["power_max"], point["utilization_avg"]) == (312.7, 312.7, 61.3)
    assert point["temperature_max"] == 71.1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-11-20T12:00:00"}, "since"),
        ({"since": "2026-11-20T13:00:00Z", "until": "2026-11-20T12:00:00Z"}, "since"),
        ({"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
        ({"gpu": "first"}, "gpu"),
        ({"until": "2026-13-01T00:00:00Z"}, "until"),
    ],
)
def test_the_samples_api_refuses_bad_parameters_with_400(api, node, params, field):
    response = api.get(reverse("api:node-gpu-samples", args=[node.pk]), params)
    assert response.status_code == 400
    assert field in json.loads(response.content)["fields"]
