"""The OpenAPI schema at /api/schema/ is generated without warnings and is valid OpenAPI 3."""

from __future__ import annotations

import msgspec
import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from telemetry.schema import ReportBatch

TRANSITION = "/api/nodes/{id}/transitions/{name}/"
GPU_ACTIONS = tuple(f"/api/nodes/{{id}}/gpus/{{index}}/{verb}/" for verb in ("fence", "clear"))
MAINTENANCE_ACTIONS = ("/api/nodes/{id}/maintenance/start/", "/api/nodes/{id}/maintenance/end/")
ALERT_ACTIONS = tuple(f"/api/alerts/{{id}}/{verb}/" for verb in ("acknowledge", "silence", "unsilence", "resolve"))
REPAIR_ACTIONS = tuple(f"/api/repairs/{{id}}/{verb}/" for verb in ("start", "resolve", "cancel"))
RMA_ACTIONS = tuple(f"/api/rma/{{id}}/{verb}/" for verb in ("ship", "receive", "close", "cancel"))
REMEDIATION_ACTIONS = (
    *(f"/api/remediations/{{id}}/{verb}/" for verb in ("approve", "skip-rung", "stop")),
    "/api/holds/",
    "/api/holds/{id}/release/",
    "/api/circuit-breakers/{id}/reset/",
)
FEED_ACTIONS = (
    "/api/event-subscriptions/",
    "/api/event-subscriptions/{id}/deactivate/",
    "/api/event-dead-letters/{id}/redeliver/",
)


@pytest.fixture
def schema():
    GENERATOR_STATS.reset()  # warnings are counted per process; count only this generation's
    return SchemaGenerator().get_schema(request=None, public=True)


def test_it_generates_without_warnings_and_validates(tmp_path):
    GENERATOR_STATS.reset()
    # Fails on any warning (printed to stderr) and on any violation of the OpenAPI 3 JSON schema.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    validate_schema(yaml.safe_load((tmp_path / "schema.yaml").read_text()))


def test_it_documents_every_endpoint(schema):
    assert set(schema["paths"]) == {
        "/api/nodes/",
        "/api/nodes/{id}/",
        "/api/nodes/{id}/history/",
        "/api/nodes/{id}/transitions/",
        TRANSITION,
        *GPU_ACTIONS,
        *MAINTENANCE_ACTIONS,
        "/api/sites/",
        "/api/sites/{id}/",
        "/api/clusters/",
        "/api/clusters/{id}/",
        "/api/tenants/",
        "/api/tenants/{id}/",
        "/api/hardware-profiles/",
        "/api/hardware-profiles/{id}/",
        "/api/personas/",
        "/api/personas/{id}/",
        # Telemetry (the agents' own POST /api/agent/reports/ is a lean plain view, added by nodewarden/openapi.py).
        "/api/agent/reports/",
        "/api/nodes/{id}/gpu-health/",
        "/api/nodes/{id}/gpu-samples/",
        "/api/ingest/dcgm-exporter/",
        "/api/nodes/{id}/commands/",
        "/api/agent/commands/",
        "/api/agent/state/",
        "/api/agent/commands/{id}/result/",
        # Health
        "/api/findings/",
        "/api/findings/{id}/",
        "/api/alerts/",
        "/api/alerts/{id}/",
        *ALERT_ACTIONS,
        "/api/health-rules/",
        "/api/health-rules/{id}/",
        "/api/xid-catalog/",
        "/api/xid-catalog/{xid}/",
        "/api/ingest/alertmanager/",
        "/api/nodes/{id}/report-bad/",
        # Active checks
        "/api/nodes/{id}/checks/",
        "/api/checks/{id}/",
        "/api/checks/{id}/cancel/",
        "/api/nodes/{id}/give-back/",
        "/api/agent/checks/",
        "/api/agent/checks/{id}/",
        "/api/agent/checks/{id}/result/",
        # Day 0 (the agent's POST /api/agent/join/ is a lean plain view, like its reports)
        "/api/agent/join/",
        "/api/enrollments/",
        "/api/nodes/{id}/provision/",
        # Day 1
        "/api/nodes/{id}/stages/",
        "/api/nodes/{id}/stages/start/",
        "/api/nodes/{id}/stages/skip/",
        "/api/nodes/{id}/persona/",
        "/api/day1/summary/",
        # Fabric
        "/api/fabric/plans/",
        "/api/fabric/discoveries/",
        "/api/fabric/runs/",
        "/api/fabric/runs/{id}/",
        "/api/fabric/discrepancies/",
        "/api/fabric/links/",
        "/api/fabric/tickets/",
        "/api/fabric/tickets/{id}/",
        "/api/fabric/tickets/{id}/close/",
        "/api/fabric/validations/",
        # Repairs and RMA
        "/api/repairs/",
        "/api/repairs/{id}/",
        *REPAIR_ACTIONS,
        "/api/repairs/export.csv",
        "/api/rma/",
        "/api/rma/{id}/",
        *RMA_ACTIONS,
        "/api/rma/export.csv",
        "/api/nodes/{id}/repairs/",
        "/api/nodes/{id}/rma/",
        # Remediation
        "/api/remediations/",
        "/api/remediations/{id}/",
        *REMEDIATION_ACTIONS,
        "/api/circuit-breakers/",
        "/api/nodes/{id}/remediations/",
        # Trends
        "/api/trends/flags/",
        "/api/trends/lemons/",
        "/api/reports/availability/",
        "/api/reports/flows/",  # Reports
        # The event feed
        "/api/events/",
        "/api/event-subscriptions/{id}/",
        "/api/event-dead-letters/",
        "/api/event-dead-letters/{id}/",
        *FEED_ACTIONS,
    }


def test_every_write_is_a_named_action_never_a_raw_update(schema):
    """No PUT/PATCH/DELETE anywhere: state, alerts and checks change only through named verbs."""
    writes = {
        (path, method)
        for path, ops in schema["paths"].items()
        for method in ops
        if method in ("post", "put", "patch", "delete")
    }
    assert writes == {
        (path, "post")
        for path in (
            TRANSITION,
            *GPU_ACTIONS,
            *MAINTENANCE_ACTIONS,
            *ALERT_ACTIONS,
            "/api/agent/reports/",
            "/api/agent/join/",
            "/api/ingest/alertmanager/",
            "/api/nodes/{id}/report-bad/",
            "/api/ingest/dcgm-exporter/",
            "/api/nodes/{id}/checks/",
            "/api/checks/{id}/cancel/",
            "/api/nodes/{id}/give-back/",
            "/api/agent/checks/{id}/result/",
            "/api/nodes/{id}/commands/",
            "/api/agent/commands/{id}/result/",
            "/api/enrollments/",
            "/api/nodes/{id}/provision/",
            "/api/nodes/{id}/stages/start/",
            "/api/nodes/{id}/stages/skip/",
            "/api/nodes/{id}/persona/",
            "/api/fabric/plans/",
            "/api/fabric/discoveries/",
            "/api/fabric/tickets/{id}/close/",
            "/api/fabric/validations/",
            *REPAIR_ACTIONS,
            *RMA_ACTIONS,
            "/api/nodes/{id}/repairs/",
            "/api/nodes/{id}/rma/",
            *REMEDIATION_ACTIONS,
            *FEED_ACTIONS,
        )
    }


def test_the_transition_post_documents_its_body_and_every_answer(schema):
    post = schema["paths"][TRANSITION]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert schema["components"]["schemas"][body]["required"] == ["reason"]
    assert set(post["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "415", "429"}
    name = next(p for p in post["parameters"] if p["name"] == "name")
    assert "cordon" in name["schema"]["enum"] and "force_state" not in name["schema"]["enum"]


def test_history_is_documented_as_a_paginated_list_of_events(schema):
    get = schema["paths"]["/api/nodes/{id}/history/"]["get"]
    page = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert page.endswith("/PaginatedNodeEventList")
    assert {p["name"] for p in get["parameters"]} == {"id", "limit", "offset", "kind", "range", "since", "until"}


def test_the_node_list_documents_the_node_list_filters(schema):
    names = {p["name"] for p in schema["paths"]["/api/nodes/"]["get"]["parameters"]}
    assert names == {
        "q",
        "state",
        "phase",
        "in_trouble",
        "site",
        "cluster",
        "rack",
        "tenant",
        "unassigned",
        "hardware_profile",
        "persona",
        "ordering",
        "limit",
        "offset",
    }


def test_the_agent_report_is_documented_by_the_type_that_decodes_it(schema):
    """The request body of POST /api/agent/reports/ is msgspec's own schema of ReportBatch, component for
    component: a field added to telemetry/schema.py is in the document with its bounds and nullability."""
    (batch,), components = msgspec.json.schema_components((ReportBatch,), ref_template="#/components/schemas/{name}")
    post = schema["paths"]["/api/agent/reports/"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == batch
    assert {name: schema["components"]["schemas"][name] for name in components} == components
    gpu = schema["components"]["schemas"]["GpuReading"]["properties"]
    assert gpu["temperature_c"] == {
        "anyOf": [{"type": "number", "minimum": -50, "maximum": 200}, {"type": "null"}],
        "default": None,
    }
    assert post["security"] == [{"nodeAgentToken": []}]
    assert set(post["responses"]) == {"200", "400", "401", "403", "413", "429", "503"}


def test_the_join_is_documented(schema):
    post = schema["paths"]["/api/agent/join/"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["required"] == ["join_token", "hostname"]
    assert set(post["responses"]) == {"201", "400", "401", "403", "409", "410", "413", "429"}


def test_every_operation_documents_its_errors(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert {"401", "403"} <= set(operation["responses"]), (method, path)
            if "{" in path:
                assert "404" in operation["responses"], (method, path)
            assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorResponse"
            }


def test_what_customers_cannot_see_is_declared(schema):
    absent = {
        (path, method)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if op.get("x-customer-view") == "absent"
    }
    assert ("/api/fabric/runs/", "get") in absent and ("/api/holds/", "post") in absent
    assert ("/api/trends/lemons/", "get") in absent
    assert ("/api/nodes/", "get") not in absent and ("/api/alerts/", "get") not in absent
    assert "404" in schema["paths"]["/api/trends/lemons/"]["get"]["responses"]


@pytest.mark.django_db
def test_the_schema_is_served_to_a_signed_in_user(client, viewer):
    assert client.get("/api/schema/").status_code == 401  # NODEWARDEN_API_DOCS=authenticated, the default
    client.force_login(viewer)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert yaml.safe_load(response.content)["info"]["title"] == "Nodewarden API"


def test_the_api_docs_page_leads_back_to_the_portal(client, viewer):
    client.force_login(viewer)
    html = client.get("/api/docs/").content.decode()
    assert '<a id="back-to-portal" href="/">' in html
