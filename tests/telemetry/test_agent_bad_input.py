"""An agent report the database could not store is a 400 naming the field, never a 500:
integers past their column (bigint counters, the smallint/int sums) and invalid UTF-8."""

from __future__ import annotations

import json

import pytest

from telemetry.models import IngestRejection, NodeReport
from telemetry.testing import make_batch

from .conftest import T0

pytestmark = pytest.mark.django_db


def _batch(node):
    return make_batch(node.hostname, start=T0)


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (lambda r: r, "seq"),
        (lambda r: r["gpus"][0], "ecc_aggregate_corrected"),
        (lambda r: r["gpus"][0], "sm_clock_mhz"),
        (lambda r: r["gpus"][0], "compute_processes"),
    ],
)
@pytest.mark.parametrize("value", [2**63, 2**70])
def test_an_integer_past_its_column_is_a_400_naming_the_field(agent, node, where, path, value):
    body = _batch(node)
    where(body["reports"][0])[path] = value
    response = agent.post(body)
    assert response.status_code == 400, response.content
    assert f"{path}`" in response.json()["detail"] and response.json()["code"] == "invalid_report"
    assert NodeReport.objects.count() == 0


def test_a_largest_bigint_counter_is_stored(agent, node):
    body = _batch(node)
    body["reports"][0]["gpus"][0]["ecc_aggregate_corrected"] = 2**63 - 1
    assert agent.post(body).status_code == 200


def test_compute_processes_summed_over_64_gpus_fit_their_column(agent, node):
    body = _batch(node)
    body["reports"][0]["gpus"][0]["compute_processes"] = 2**31 // 64  # 64 of these overflow an int
    assert agent.post(body).status_code == 400


@pytest.mark.parametrize("field", ["pid", "kmsg_seq"])
def test_an_xid_integer_past_a_bigint_is_a_400(agent, node, field):
    body = _batch(node)
    body["reports"][0]["xid_events"] = [{"xid": 79, "observed_at": T0.isoformat(), "raw": "NVRM: Xid 79", field: 2**63}]
    response = agent.post(body)
    assert response.status_code == 400, response.content
    assert f"{field}`" in response.json()["detail"]


def test_invalid_utf8_inside_a_string_is_a_400(agent, node):
    raw = json.dumps(_batch(node)).encode().replace(b'"agent_version": "', b'"agent_version": "\xff\xfe', 1)
    assert b"\xff" in raw
    response = agent.post(raw)
    assert response.status_code == 400, response.content
    assert "UTF-8" in response.json()["detail"]
    assert IngestRejection.objects.get().status == 400
