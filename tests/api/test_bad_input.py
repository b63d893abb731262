"""Bad input from an integrator is a 4xx that says what was wrong, in one body shape, never a 500.

Each input class of issue 14 has a test here; the walk at the end sends huge integers to every
GET operation of the OpenAPI schema as an operator and as a customer. Run with PG=1 too: the
bigint overflow is PostgreSQL's own refusal.
"""

from __future__ import annotations

import inspect

import django_filters
import pytest
from django.apps import apps
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator

from nodes.choices import NodeState
from nodewarden import filters as project_filters
from nodewarden.api import MAX_JSON_DEPTH, MAX_PAGE_SIZE
from nodewarden.bounds import BIGINT_MAX
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
HUGE = str(2**70)
SHAPE = {"detail", "code", "fields"}


def assert_error(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) >= SHAPE and isinstance(body["detail"], str) and body["detail"]
    if field is not None:
        assert field in body["fields"], body
        assert field in body["detail"]
    return body


# -- pagination ---------------------------------------------------------------------------------


def test_a_huge_limit_is_clamped_to_the_largest_page(api_as, operator):
    NodeFactory.create_batch(3)
    response = api_as(operator).get("/api/nodes/", {"limit": HUGE})
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) == 3
    assert f"limit={MAX_PAGE_SIZE}" in (
        api_as(operator).get("/api/nodes/", {"limit": HUGE, "offset": 1}).json()["previous"] or f"limit={MAX_PAGE_SIZE}"
    )


def test_an_offset_past_a_bigint_is_refused(api_as, operator):
    NodeFactory()
    assert_error(api_as(operator).get("/api/nodes/", {"offset": HUGE}), 400, "offset")
    assert api_as(operator).get("/api/nodes/", {"offset": str(BIGINT_MAX)}).json()["results"] == []


# -- integer query filters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "param"),
    [
        ("/api/findings/", "node"),
        ("/api/findings/", "gpu"),
        ("/api/findings/", "xid"),
        ("/api/alerts/", "node"),
        ("/api/remediations/", "node"),
        ("/api/holds/", "cluster"),
        ("/api/repairs/", "node"),
        ("/api/fabric/discrepancies/", "run"),
        ("/api/trends/flags/", "node"),
    ],
)
def test_an_integer_filter_past_its_column_is_a_400_naming_it(api_as, operator, url, param):
    for value in (HUGE, str(2**63), "1.5", "1e999999999"):
        assert_error(api_as(operator).get(url, {param: value}), 400, param)


def test_a_gpu_index_past_the_largest_gpu_is_refused(api_as, operator):
    node = NodeFactory()
    assert_error(api_as(operator).get(f"/api/nodes/{node.pk}/gpu-samples/", {"gpu": HUGE}), 400, "gpu")


def test_every_filterset_is_bounded():
    """The mechanism: every FilterSet derives from nodewarden.filters.FilterSet, and none declares
    django-filter's unbounded NumberFilter (a Decimal up to 1e50) or an unbounded date-time filter."""
    project = {c.name for c in apps.get_app_configs() if not c.path.count("site-packages")}
    found = []
    for module_name in [f"{app}.filters" for app in project]:
        try:
            module = __import__(module_name, fromlist=["_"])
        except ImportError:
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, django_filters.FilterSet) and cls.__module__ == module_name:
                found.append(cls)
                assert issubclass(cls, project_filters.FilterSet), cls
                for name, f in cls.base_filters.items():
                    if isinstance(f, django_filters.NumberFilter):
                        assert isinstance(f, project_filters.IntegerFilter), (cls, name)
                    if isinstance(f, django_filters.DateTimeFilter):
                        assert isinstance(f, project_filters.IsoDateTimeFilter), (cls, name)
    assert len(found) >= 10


def test_every_integer_of_a_request_body_has_a_maximum():
    """Writes: each integer a body may carry is bounded in the serializer that decodes it."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    unbounded = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            for media in (op.get("requestBody") or {}).get("content", {}).values():
                ref = media.get("schema", {}).get("$ref", "")
                body = components.get(ref.rsplit("/", 1)[-1], {})
                for name, prop in body.get("properties", {}).items():
                    if prop.get("type") == "integer" and not prop.get("readOnly") and "maximum" not in prop:
                        unbounded.append((method, path, name))
    assert set(unbounded) <= RELATED_IDS


# PrimaryKeyRelatedFields: Django's own lookup answers an out-of-range id as "no such object".
RELATED_IDS = {("post", "/api/holds/", name) for name in ("node", "cluster", "rack", "tenant")}


@pytest.mark.parametrize("name", ["node", "cluster", "rack", "tenant"])
def test_a_related_id_past_a_bigint_is_a_400_naming_it(api_as, operator, name):
    body = {name: 2**70, "reason": "maintenance window"}
    assert_error(api_as(operator).post("/api/holds/", body, format="json"), 400, name)


def test_a_finding_id_past_a_bigint_on_a_repair_request_is_a_400(api_as, operator):
    node = NodeFactory(state=NodeState.TRIAGE)
    body = {"component": "GPU 3", "what": "Replace the GPU", "reason": "XID 79", "finding_id": 2**63}
    assert_error(api_as(operator).post(f"/api/nodes/{node.pk}/repairs/", body, format="json"), 400, "finding_id")


# -- date-time query filters --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["2026-01-01T00:00:00+23:00", "2026-01-01T00:00:00-16:00", "0001-01-01T00:00:00+01:00"]
)
def test_a_utc_offset_postgresql_refuses_in_a_query_filter_is_a_400(api_as, operator, value):
    node = NodeFactory()
    assert_error(api_as(operator).get("/api/findings/", {"since": value}), 400, "since")
    for name in ("since", "until"):
        other = {"since": "2025-12-31T23:00:00Z"} if name == "until" else {"until": "2026-01-02T00:00:00Z"}
        response = api_as(operator).get(f"/api/nodes/{node.pk}/gpu-samples/", {name: value, **other})
        assert_error(response, 400, name)


def test_an_offset_of_15_59_is_still_accepted(api_as, operator):
    assert api_as(operator).get("/api/findings/", {"since": "2026-01-01T00:00:00+15:59"}).status_code == 200


# -- bodies: nesting, size ----------------------------------------------------------------------


def test_deeply_nested_json_is_refused_before_decoding(api_as, operator):
    node = NodeFactory(state=NodeState.TRIAGE)
    deep = b"[" * 5000 + b"]" * 5000
    for url in (f"/api/nodes/{node.pk}/transitions/drain/", f"/api/nodes/{node.pk}/repairs/", "/api/holds/"):
        body = assert_error(api_as(operator).post(url, deep, content_type="application/json"), 400)
        assert body["code"] == "parse_error" and str(MAX_JSON_DEPTH) in body["detail"]
    # Brackets inside strings are text, not nesting.
    text = {"reason": "[" * 5000}
    assert api_as(operator).post(f"/api/nodes/{node.pk}/transitions/drain/", text, format="json").status_code != 400


def test_deeply_nested_json_on_the_agent_join_is_a_400(api):
    deep = b'{"join_token": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = api.post("/api/agent/join/", deep, content_type="application/json")
    assert_error(response, 400)


@override_settings(NODEWARDEN_API_MAX_BODY_BYTES=1000)
def test_a_body_over_the_limit_is_a_413(api_as, operator):
    node = NodeFactory(state=NodeState.TRIAGE)
    response = api_as(operator).post(f"/api/nodes/{node.pk}/transitions/drain/", {"reason": "x" * 2000}, format="json")
    assert assert_error(response, 413)["code"] == "too_large"


# -- routes and uploads -------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["history.json", "transitions.json", "history.api"])
def test_a_format_suffix_on_a_node_action_is_not_a_route(api_as, operator, suffix):
    node = NodeFactory()
    assert api_as(operator).get(f"/api/nodes/{node.pk}/{suffix}").status_code == 404


def test_a_csv_plan_with_a_field_over_the_csv_limit_is_a_400_with_its_line(api_as, operator):
    plan = "a_device,a_port,b_device,b_port\n" + f'leaf01,1,"{"x" * 200_000}",1\n'
    response = api_as(operator).post("/api/fabric/plans/", plan.encode(), content_type="text/csv")
    body = assert_error(response, 400)
    assert body["errors"][0]["line"] == 2 and "field larger than field limit" in body["errors"][0]["message"]


# -- one shape ----------------------------------------------------------------------------------


def test_every_4xx_has_one_body_shape(api, api_as, operator, viewer):
    node = NodeFactory(state=NodeState.TRIAGE)
    assert_error(api.get("/api/nodes/"), 401 if api.get("/api/nodes/").status_code == 401 else 403)
    assert_error(api_as(operator).get("/api/nodes/999999/"), 404)
    assert_error(api_as(viewer).post(f"/api/nodes/{node.pk}/transitions/drain/", {"reason": "x"}), 403)
    assert_error(api_as(operator).post(f"/api/nodes/{node.pk}/transitions/drain/", {}), 400, "reason")
    assert_error(api_as(operator).post(f"/api/nodes/{node.pk}/transitions/commission/", {"reason": "x"}), 409)
    assert_error(api_as(operator).delete(f"/api/nodes/{node.pk}/"), 405)
    assert_error(api_as(operator).get("/api/nodes/", {"state": "sleeping"}), 400, "state")


# -- the walk -----------------------------------------------------------------------------------


def _get_operations() -> list[tuple[str, list[dict]]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [(path, item["get"].get("parameters", [])) for path, item in schema["paths"].items() if "get" in item]


@pytest.mark.parametrize("who", ["operator", "customer"])
def test_no_get_operation_answers_5xx_to_huge_integers(who, request, api_as, tenant):
    client = api_as(request.getfixturevalue(who))
    client.raise_request_exception = False
    node = NodeFactory(tenant=tenant)
    failures = []
    for path, params in _get_operations():
        url = path
        for p in params:
            if p["in"] == "path":
                url = url.replace("{" + p["name"] + "}", str(node.pk))
        integers = {
            p["name"]: HUGE
            for p in params
            if p["in"] == "query" and p.get("schema", {}).get("type") in ("integer", "number")
        }
        for query in ({"limit": HUGE}, {"offset": HUGE}, {"limit": HUGE, "offset": HUGE, **integers}, integers):
            response = client.get(url, query)
            if response.status_code >= 500:
                failures.append((url, query, response.status_code))
            elif response.status_code >= 400:
                assert set(response.json()) >= SHAPE, (url, query, response.content)
    assert failures == [], "\n".join(map(str, failures))
