"""Schemathesis fuzzes every operation of the served OpenAPI document, on the test database.

Requests go through Django's real WSGI application in-process (schemathesis' WSGI transport),
inside the test's transaction, as an operator (token auth) and as a customer's user (token auth);
the agent's endpoints also as the node agent (its bearer token). Each response is checked for
server errors and against the document (its status code is documented, its body matches the
documented schema). Positive and negative cases; a bounded, derandomized budget per operation.

Each case is sent twice: as generated (random ids: mostly 404s) and with every path id replaced
by a real object's, so the documented 200 bodies are checked against what the API really returns.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from django.apps import apps
from django.contrib.auth.models import Group
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from nodes.choices import NodeState
from nodes.roles import OPERATORS
from nodes.services import Actor
from telemetry.auth import forget_cached_tokens
from telemetry.ingest import ingest_reports
from telemetry.schema import decode_batch
from telemetry.services import issue_agent_token
from tests.factories import GPUFactory, NodeFactory, TenantFactory, UserFactory

MAX_EXAMPLES = 5  # per operation and role (each also sent on real ids): ~1200 cases, ~30 s on one core
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
AGENT_HOSTNAME = "gpu-fuzz-001"

APP = WSGIHandler()


def _served_document() -> dict:
    """The document /api/schema/ serves (the same generator and hooks, rendered to JSON), built at
    collection: serving it needs a login (NODEWARDEN_API_DOCS), and no user exists before the tests."""
    import json

    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


schema = schemathesis.openapi.from_dict(_served_document())
schema.app = APP

# Which model a path's {id} names, by the path's leading segments (longest match first).
ID_MODELS = {
    "nodes": "nodes.Node",
    "sites": "fleet.Site",
    "clusters": "fleet.Cluster",
    "tenants": "fleet.Tenant",
    "hardware-profiles": "fleet.HardwareProfile",
    "personas": "fleet.Persona",
    "alerts": "health.Alert",
    "findings": "health.Finding",
    "health-rules": "health.HealthRule",
    "xid-catalog": "health.XidDefinition",
    "checks": "nodes.Run",
    "agent/checks": "nodes.Run",
    "repairs": "repairs.RepairTicket",
    "rma": "repairs.RmaCase",
    "remediations": "remediation.Remediation",
    "holds": "remediation.Hold",
    "circuit-breakers": "remediation.CircuitBreaker",
    "fabric/runs": "fabric.DiscoveryRun",
    "fabric/tickets": "fabric.Ticket",
    "event-subscriptions": "feeds.Subscription",
    "event-dead-letters": "feeds.DeadLetter",
}

CASES: Counter[str] = Counter()
STARTED = time.monotonic()


@pytest.fixture
def wsgi_requests_keep_the_test_transaction():
    """Django's WSGI handler closes the connection around each request (close_old_connections): that
    would end the test's transaction. The test client disconnects it the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker) -> Any:
    """Seeded once for the module, inside a transaction rolled back at its end (each test's own
    transaction nests in it): a customer's node that has reported (GPU health, an XID finding and
    alert), another tenant's node, and the credentials of the three callers."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            yield _seed()
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def _seed() -> dict[str, dict[str, str]]:
    operator = UserFactory(username="fuzz-operator", is_staff=True)
    operator.groups.add(Group.objects.get(name=OPERATORS))
    tenant = TenantFactory(slug="fuzz-acme")
    customer = UserFactory(username="fuzz-customer", tenant=tenant)
    node = NodeFactory(hostname=AGENT_HOSTNAME, tenant=tenant, state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=0)
    NodeFactory(tenant=TenantFactory(slug="fuzz-other"), state=NodeState.PRODUCTION)
    now = datetime.now(UTC)
    report = {
        "report_id": "fuzz-seed-0001",
        "hostname": AGENT_HOSTNAME,
        "collected_at": now.isoformat(),
        "boot_id": "b" * 32,
        "gpus": [{"index": 0, "uuid": "GPU-fuzz-0", "temperature_c": 40.0}],
        "xid_events": [
            {
                "xid": 79,
                "observed_at": (now - timedelta(seconds=5)).isoformat(),
                "kmsg_seq": 1,
                "raw": "NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus.",
            }
        ],
    }
    ingest_reports(node.pk, decode_batch(json.dumps({"reports": [report]}).encode()), source="agent")
    return {
        "operator": {"Authorization": f"Token {Token.objects.create(user=operator).key}"},
        "customer": {"Authorization": f"Token {Token.objects.create(user=customer).key}"},
        "agent": {"Authorization": f"Bearer {issue_agent_token(node.pk, actor=Actor.system('fuzz'))}"},
    }


@pytest.fixture
def fleet(seeded, db, wsgi_requests_keep_the_test_transaction) -> Any:
    forget_cached_tokens()
    yield seeded
    forget_cached_tokens()


def _real_ids(case: schemathesis.Case) -> dict[str, Any] | None:
    """The case's path parameters with each id replaced by an existing object's, or None."""
    if not case.path_parameters or ("id" not in case.path_parameters and "xid" not in case.path_parameters):
        return None
    segments = case.operation.path.removeprefix("/api/").split("/")
    key = "/".join(segments[:2]) if "/".join(segments[:2]) in ID_MODELS else segments[0]
    if key not in ID_MODELS:
        return None
    obj = apps.get_model(ID_MODELS[key]).objects.order_by("pk").first()
    if obj is None:
        return None
    name = "xid" if "xid" in case.path_parameters else "id"
    return {**case.path_parameters, name: getattr(obj, "xid" if name == "xid" else "pk")}


def _send(case: schemathesis.Case, headers: dict[str, str], role: str) -> None:
    CASES[role] += 1
    case.call_and_validate(headers=headers, checks=CHECKS)


@pytest.mark.parametrize("role", ["operator", "customer", "agent"])
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_operation(case: schemathesis.Case, role: str, fleet: dict[str, Any]) -> None:
    if role == "agent" and not case.operation.path.startswith("/api/agent/"):
        pytest.skip("the agent's token opens only /api/agent/")
    if role == "agent" and isinstance(case.body, dict) and isinstance(case.body.get("reports"), list):
        # A report for another node is a 403: make most of them this node's, to reach the ingest.
        for report in case.body["reports"]:
            if isinstance(report, dict) and "hostname" in report:
                report["hostname"] = AGENT_HOSTNAME
    _send(case, fleet[role], role)
    real = _real_ids(case)
    if real is not None:
        case.path_parameters = real
        _send(case, fleet[role], role)


def test_case_counts_are_reported() -> None:
    """Prints the fuzzer's case counts per role in this process (pytest -s, or the -ra summary).

    Under pytest-xdist the cases may have run in another worker, so what is checked is that the
    fuzzer has operations to run at all: a document with none collects no case and passes silently.
    """
    total = sum(CASES.values())
    print(f"schemathesis cases here: {dict(CASES)} total {total} in {time.monotonic() - STARTED:.0f}s")
    operations = [op for op in schema.get_all_operations() if op.ok()]
    assert len(operations) >= 50, f"the fuzzer has only {len(operations)} operations to run"
