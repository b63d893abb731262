"""POST /api/agent/join/ (the agent's) and POST /api/nodes/{id}/provision/ (the operator's)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from nodes.choices import NodeState
from nodes.models import NodeEvent
from provisioning.models import JoinToken
from tests.factories import NodeFactory

from .conftest import PORTAL, provision

pytestmark = pytest.mark.django_db
JOIN = "/api/agent/join/"


def post_join(client, body, **extra):  # type: ignore[no-untyped-def]
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(JOIN, data=data, content_type="application/json", **extra)


def a_join(node, token, **overrides):  # type: ignore[no-untyped-def]
    return {"join_token": token, "hostname": node.hostname, "facts": {"kernel": "6.8.0"}, **overrides}


# --- the agent's join -----------------------------------------------------------------------------
def test_the_route_is_named_agent_join():
    assert reverse("api:agent-join") == JOIN


def test_a_join_answers_the_node_token_and_the_node_is_onboard(client, node):
    _, token = provision(node)
    response = post_join(client, a_join(node, token))
    assert response.status_code == 201, response.json()
    data = response.json()
    assert set(data) == {"node_token", "hostname", "node_id"}
    assert data["node_token"].startswith("nwa_") and (data["hostname"], data["node_id"]) == (node.hostname, node.pk)
    assert response["Cache-Control"] == "no-store"
    node.refresh_from_db()
    assert node.state == NodeState.ONBOARD


def test_it_needs_no_csrf_token(node):
    from django.test import Client

    _, token = provision(node)
    assert post_join(Client(enforce_csrf_checks=True), a_join(node, token)).status_code == 201


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ("{not json", "The body is not JSON"),
        ("[1, 2]", "Send a JSON object"),
        ({"hostname": "h"}, "join_token: required"),
        ({"join_token": 5, "hostname": "h"}, "join_token: required"),
        ({"join_token": "nwj_x"}, "hostname: required"),
        ({"join_token": "nwj_x", "hostname": "h" * 254}, "hostname: required"),
    ],
)
def test_a_malformed_request_is_a_400_saying_what_is_wrong(client, body, detail):
    response = post_join(client, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid join" and detail in response.json()["detail"]


def test_bad_facts_are_a_400(client, node):
    _, token = provision(node)
    response = post_join(client, a_join(node, token, facts=["x"]))
    assert (response.status_code, response.json()["detail"]) == (400, "facts: Must be a JSON object.")


def test_each_refusal_has_its_status_and_message(client, node, slurm_node):
    _, token = provision(node)
    cases = [
        (a_join(node, "nwj_" + "x" * 43), 401, "unknown join token"),
        (a_join(node, token, hostname=slurm_node.hostname), 403, "wrong node"),
    ]
    for body, status, error in cases:
        response = post_join(client, body)
        assert (response.status_code, response.json()["error"]) == (status, error), response.json()
    assert post_join(client, a_join(node, token)).status_code == 201
    response = post_join(client, a_join(node, token))
    assert (response.status_code, response.json()["error"]) == (409, "join token already used")
    assert "already used at" in response.json()["detail"]


def test_expired_and_revoked_tokens_are_gone_410(client, node, slurm_node):
    _, revoked = provision(node)
    _, _live = provision(node)
    response = post_join(client, a_join(node, revoked))
    assert (response.status_code, response.json()["error"]) == (410, "join token revoked")
    _, expiring = provision(slurm_node)
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        response = post_join(client, a_join(slurm_node, expiring))
    assert (response.status_code, response.json()["error"]) == (410, "join token expired")


def test_a_node_that_left_initializing_is_a_409(client, node):
    from nodes import services as lifecycle
    from nodes.services import Actor

    _, token = provision(node)
    lifecycle.fail_validation(node.pk, actor=Actor.system("tests"), reason="no POST")
    response = post_join(client, a_join(node, token))
    assert (response.status_code, response.json()["error"]) == (409, "node not initializing")


def test_only_post_is_allowed_and_the_body_is_bounded(client):
    assert client.get(JOIN).status_code == 405
    response = post_join(client, {"join_token": "nwj_x", "hostname": "h", "facts": {"x": "y" * 70_000}})
    assert (response.status_code, response.json()["error"]) == (413, "body too large")


# --- the operator's provision request -------------------------------------------------------------
def provision_url(node) -> str:
    return f"/api/nodes/{node.pk}/provision/"


def test_the_route_is_named_node_provision(node):
    assert reverse("api:node-provision", kwargs={"pk": node.pk}) == provision_url(node)


def test_an_operator_provisions_a_node_and_gets_the_seed_and_the_token_once(api_as, operator, node):
    response = api_as(operator).post(
        provision_url(node),
        {
            "reason": "racked in r12",
            "interface_mac": "3C:EC:EF:12:34:56",
            "ip_address": "10.1.2.3",
            "prefix_length": 24,
            "gateway": "10.1.2.1",
            "dns_servers": ["10.0.0.53"],
            "vlan_id": 42,
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    data = response.json()
    stored = JoinToken.objects.get(node=node)
    assert data["join_token"].startswith("nwj_") and stored.prefix == data["join_token_prefix"]
    assert stored.key_hash not in json.dumps(data) and stored.salt not in json.dumps(data)
    instance_key = node.boot_config.instance_key
    assert data["seed_url"] == f"{PORTAL}/cloud-init/{instance_key}/"
    assert data["kernel_cmdline"] == f"ds=nocloud;s={PORTAL}/cloud-init/{instance_key}/"
    assert data["boot_config"]["interface_mac"] == "3c:ec:ef:12:34:56" and data["boot_config"]["vlan_id"] == 42
    assert (data["node"]["state"], data["kubernetes_bootstrap_token"]) == (NodeState.INITIALIZING, None)
    assert response["Cache-Control"] == "no-store"
    assert NodeEvent.objects.get(node=node).actor_name == "operator"


def test_a_kubernetes_node_also_gets_its_bootstrap_token(api_as, operator, k8s_node):
    data = api_as(operator).post(provision_url(k8s_node), {"reason": "r"}, format="json").json()
    assert data["kubernetes_bootstrap_token"] == JoinToken.objects.get(node=k8s_node).kubeadm_token()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "reason", "required"),
        ({"reason": "  "}, "reason", "blank"),
        ({"reason": "r", "interface_mac": "3c:ec"}, "interface_mac", "is not a MAC address"),
        ({"reason": "r", "ip_address": "10.1.2.300"}, "ip_address", "valid IPv4 or IPv6"),
        (
            {
                "reason": "r",
                "interface_mac": "3c:ec:ef:12:34:56",
                "ip_address": "10.1.2.3",
                "prefix_length": 24,
                "gateway": "10.9.9.1",
            },
            "gateway",
            "not in the node's network",
        ),
        ({"reason": "r", "vlan_id": 0}, "vlan_id", "greater than or equal to 1"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field_and_changes_nothing(api_as, operator, node, body, field, message):
    response = api_as(operator).post(provision_url(node), body, format="json")
    assert response.status_code == 400
    assert message in " ".join(response.json()["fields"][field]), response.json()
    node.refresh_from_db()
    assert node.state == NodeState.ENROLLED and not JoinToken.objects.exists()


def test_who_may_provision(api_as, api_client_anonymous, viewer, customer, operator, node):
    assert api_client_anonymous.post(provision_url(node), {"reason": "r"}).status_code in (401, 403)
    assert api_as(viewer).post(provision_url(node), {"reason": "r"}, format="json").status_code == 403
    assert api_as(customer).post(provision_url(node), {"reason": "r"}, format="json").status_code == 404
    assert not JoinToken.objects.exists()


def test_a_node_past_day_0_is_a_409(api_as, operator):
    node = NodeFactory(production=True)
    response = api_as(operator).post(provision_url(node), {"reason": "r"}, format="json")
    assert response.status_code == 409 and "only enrolled or initializing" in response.json()["detail"]


def test_an_unknown_node_is_a_404(api_as, operator):
    assert api_as(operator).post("/api/nodes/999999/provision/", {"reason": "r"}, format="json").status_code == 404


# --- the schema -----------------------------------------------------------------------------------
def test_the_schema_documents_provision_and_still_validates_without_warnings(tmp_path):
    GENERATOR_STATS.reset()
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    GENERATOR_STATS.reset()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    post = schema["paths"]["/api/nodes/{id}/provision/"]["post"]
    assert set(post["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "415", "429"}
    # A lean plain view, like the agents' report ingest; documented by nodewarden/openapi.py.
    assert set(schema["paths"]["/api/agent/join/"]["post"]["responses"]) == {
        "201",
        "400",
        "401",
        "403",
        "409",
        "410",
        "413",
        "429",
    }
