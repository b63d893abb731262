"""POST /api/agent/reports/: who may send, what is refused and why, and what is stored."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse

from nodes.services import Actor
from telemetry.models import GpuSample, GpuState, IngestRejection, NodeHealth, NodeReport, XidRecord
from telemetry.services import issue_agent_token, revoke_agent_tokens
from telemetry.testing import make_batch, make_report
from tests.factories import NodeFactory

from .conftest import T0, AgentClient

pytestmark = pytest.mark.django_db


def stored_rows() -> tuple[int, ...]:
    return (
        NodeReport.objects.count(),
        GpuSample.objects.count(),
        XidRecord.objects.count(),
        GpuState.objects.count(),
        NodeHealth.objects.count(),
    )


def test_it_is_the_api_route_named_agent_reports():
    assert reverse("api:agent-reports") == AgentClient.url


def test_it_accepts_a_batch_and_stores_reports_samples_and_latest_state(agent, node):
    response = agent.post(make_batch(node.hostname, start=T0, count=3))
    assert response.status_code == 200
    assert response.json() == {"accepted": 3, "duplicates": 0}
    assert stored_rows() == (3, 24, 0, 8, 1)


def test_it_accepts_a_gzipped_body(agent, node):
    response = agent.post(make_batch(node.hostname, start=T0, count=2), gzipped=True)
    assert response.status_code == 200
    assert response.json()["accepted"] == 2


@pytest.mark.parametrize("token", [None, "nwa_unknown", "not-a-bearer-token"])
def test_it_refuses_a_missing_or_unknown_token_with_401(agent, node, token):
    response = agent.post(make_batch(node.hostname, start=T0), token=token)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert "token" in response.json()["detail"].lower() or "authorization" in response.json()["detail"].lower()
    assert stored_rows() == (0, 0, 0, 0, 0)


def test_it_refuses_a_revoked_token(agent, node):
    revoke_agent_tokens(node.pk, actor=Actor.system("test"), reason="node re-imaged")
    response = agent.post(make_batch(node.hostname, start=T0))
    assert response.status_code == 401
    assert stored_rows() == (0, 0, 0, 0, 0)


def test_it_refuses_reports_for_another_node_and_stores_none_of_the_batch(agent, node):
    other = NodeFactory(hostname="gpu-b-002")
    body = {
        "reports": [
            make_report(node.hostname, collected_at=T0),
            make_report(other.hostname, collected_at=T0 + timedelta(seconds=30)),
        ]
    }
    response = agent.post(body)
    assert response.status_code == 403
    assert "'gpu-b-002'" in response.json()["detail"]
    assert stored_rows() == (0, 0, 0, 0, 0)
    rejection = IngestRejection.objects.get()
    assert (rejection.status, rejection.node_id, rejection.source) == (403, node.pk, "agent")


def _with(mutate):
    body = make_batch("gpu-a-001", start=T0, count=3)
    mutate(body["reports"][1])
    return body


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b'{"reports": [', "truncated"),
        (b"not json at all", "malformed"),
        (_with(lambda r: r["gpus"][2].__setitem__("temperature_c", "hot")), "$.reports[1].gpus[2].temperature_c"),
        (_with(lambda r: r["gpus"][0].__setitem__("temprature_c", 40)), "`temprature_c` - at `$.reports[1].gpus[0]`"),
        (_with(lambda r: r.__setitem__("collected_at", "2026-11-20T12:00:30")), "timezone"),
        (_with(lambda r: r["gpus"][0].__setitem__("power_w", -5)), "$.reports[1].gpus[0].power_w"),
        ({"reports": []}, "$.reports"),
    ],
)
def test_it_refuses_a_malformed_batch_with_400_naming_the_field_and_stores_nothing(agent, node, body, path):
    before = stored_rows()
    response = agent.post(body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid report"
    assert path in response.json()["detail"] or path in response.json()["detail"].lower()
    assert stored_rows() == before
    rejection = IngestRejection.objects.get()
    assert rejection.status == 400 and rejection.node_id == node.pk
    assert rejection.body_size > 0 and len(rejection.body_excerpt) <= 2048


def test_it_refuses_a_report_naming_one_gpu_index_twice(agent, node):
    body = make_batch(node.hostname, start=T0, count=2)
    body["reports"][1]["gpus"][3]["index"] = 0
    response = agent.post(body)
    assert response.status_code == 400
    assert "$.reports[1].gpus[3].index" in response.json()["detail"]
    assert stored_rows() == (0, 0, 0, 0, 0)


@override_settings(TELEMETRY_MAX_BODY_BYTES=10_000)
def test_it_refuses_an_oversized_body_with_413_and_records_it(agent, node):
    response = agent.post(make_batch(node.hostname, start=T0, count=5))
    assert response.status_code == 413
    assert "10000" in response.json()["detail"]
    assert stored_rows() == (0, 0, 0, 0, 0)
    assert IngestRejection.objects.get().status == 413


@override_settings(TELEMETRY_MAX_BODY_BYTES=10_000)
def test_it_refuses_a_gzip_body_that_inflates_past_the_limit(agent, node):
    response = agent.post(make_batch(node.hostname, start=T0, count=5), gzipped=True)
    assert response.status_code == 413


def test_it_counts_a_resent_batch_as_duplicates_and_stores_nothing_twice(agent, node):
    body = make_batch(node.hostname, start=T0, count=4)
    agent.post(body)
    resent = copy.deepcopy(body)
    resent["reports"].append(make_report(node.hostname, collected_at=T0 + timedelta(minutes=5), seed=99))
    response = agent.post(resent)
    assert response.json() == {"accepted": 1, "duplicates": 4}
    assert stored_rows() == (5, 40, 0, 8, 1)


def test_it_counts_a_report_repeated_within_one_batch_once(agent, node):
    report = make_report(node.hostname, collected_at=T0)
    response = agent.post({"reports": [report, report]})
    assert response.json() == {"accepted": 1, "duplicates": 1}


def test_it_answers_405_to_a_get(agent):
    assert agent.client.get(AgentClient.url).status_code == 405


def test_two_nodes_each_with_their_own_token_report_independently(agent, node):
    other = NodeFactory(hostname="gpu-b-002")
    other_agent = AgentClient(issue_agent_token(other.pk, actor=Actor.system("test")))
    assert agent.post(make_batch(node.hostname, start=T0)).status_code == 200
    assert other_agent.post(make_batch(other.hostname, start=T0)).status_code == 200
    assert set(NodeHealth.objects.values_list("node_id", flat=True)) == {node.pk, other.pk}


def test_a_nul_character_in_a_string_is_a_400_naming_it_not_a_500(agent, node):
    """PostgreSQL text cannot hold U+0000: refuse it up front instead of failing in the database."""
    batch = make_batch(node.hostname, start=T0)
    batch["reports"][0]["agent_version"] = "0.1.0\u0000evil"
    response = agent.post(batch)
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]
    assert stored_rows() == (0, 0, 0, 0, 0)
    assert IngestRejection.objects.get().status == 400


def test_a_raw_nul_byte_in_a_broken_body_is_recorded_and_answered_400(agent, node):
    response = agent.post(b'{"reports": [\x00]}')
    assert response.status_code == 400
    assert "\x00" not in IngestRejection.objects.get().body_excerpt
