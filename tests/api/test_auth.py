"""Who may call the API: integrations with a token, browsers with a session, nobody anonymously."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nodes.choices import NodeState
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    "/api/nodes/",
    "/api/sites/",
    "/api/clusters/",
    "/api/tenants/",
    "/api/hardware-profiles/",
    "/api/personas/",
]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_it_refuses_anonymous_requests_with_401(api, url):
    response = api.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_it_refuses_an_anonymous_transition_with_401(api):
    node = NodeFactory(state=NodeState.PRODUCTION)
    assert api.post(f"/api/nodes/{node.pk}/transitions/cordon/", {"reason": "x"}, format="json").status_code == 401


def test_a_token_authenticates_an_integration(api, viewer):
    NodeFactory()
    token = Token.objects.create(user=viewer)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    response = api.get("/api/nodes/")
    assert response.status_code == 200 and response.json()["count"] == 1


def test_an_unknown_token_is_refused_with_401(api):
    api.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert api.get("/api/nodes/").status_code == 401


def test_a_token_runs_a_transition_without_a_csrf_token(operator):
    node = NodeFactory(state=NodeState.PRODUCTION)
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=operator).key}")
    response = client.post(f"/api/nodes/{node.pk}/transitions/cordon/", {"reason": "XID 79"}, format="json")
    assert response.status_code == 201


def test_a_browser_session_authenticates(viewer):
    client = APIClient()
    client.force_login(viewer)
    assert client.get("/api/nodes/").status_code == 200


def test_a_browser_session_needs_a_csrf_token_to_post(operator):
    node = NodeFactory(state=NodeState.PRODUCTION)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(f"/api/nodes/{node.pk}/transitions/cordon/", {"reason": "XID 79"}, format="json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION
