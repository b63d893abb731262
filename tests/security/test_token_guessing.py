"""Guessing credentials is throttled: wrong API, node agent and join tokens are counted per client
address, and once NODEWARDEN_TOKEN_FAILURE_RATE is spent the client is answered 429 with
Retry-After, even for a right token, until the window has passed (nodewarden.throttling)."""

from __future__ import annotations

import json
import uuid

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nodes.services import Actor
from telemetry.auth import forget_cached_tokens
from telemetry.services import issue_agent_token
from tests.conftest import require_service
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
LIMIT = 5


@pytest.fixture(autouse=True)
def _small_allowance(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failure": f"{LIMIT}/min"}}
    forget_cached_tokens()
    yield
    forget_cached_tokens()


def _api(token: str, addr: str = "127.0.0.1") -> int:
    client = APIClient(REMOTE_ADDR=addr)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/nodes/").status_code


def test_api_token_guessing_is_answered_429_after_the_allowance(viewer):
    good = Token.objects.create(user=viewer).key
    assert [_api(f"guess-{i}") for i in range(LIMIT)] == [401] * LIMIT
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token guess-again")
    locked = client.get("/api/nodes/")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert _api(good) == 429  # a right guess gets nowhere during the lockout
    assert _api(good, addr="10.0.0.9") == 200  # another client is not affected
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=61)):
        assert _api(good) == 200


def test_right_api_tokens_are_never_counted(viewer):
    good = Token.objects.create(user=viewer).key
    assert [_api(good) for _ in range(LIMIT * 3)] == [200] * (LIMIT * 3)
    assert _api("guess") == 401


def _report(token: str, addr: str = "127.0.0.1") -> object:
    return Client(REMOTE_ADDR=addr).post(
        "/api/agent/reports/", b'{"reports": []}', content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def test_agent_token_guessing_on_ingest_is_answered_429():
    node = NodeFactory(hostname="gpu-guess-01")
    good = issue_agent_token(node.pk, actor=Actor.system("test"))
    statuses = [_report(f"nwa_{uuid.uuid4().hex}").status_code for _ in range(LIMIT)]
    assert statuses == [401] * LIMIT
    locked = _report(good)
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert json.loads(locked.content)["error"] == "too many failed attempts"
    assert _report(good, addr="10.0.0.9").status_code != 429


def test_an_agent_whose_token_is_cached_is_not_slowed_by_a_neighbours_guessing():
    node = NodeFactory(hostname="gpu-guess-02")
    good = issue_agent_token(node.pk, actor=Actor.system("test"))
    assert _report(good).status_code != 401  # looked up once, now known good in this process
    for _ in range(LIMIT):
        _report("nwa_wrong")
    assert _report(good).status_code not in (401, 429)


def test_agent_token_guessing_on_the_drf_agent_endpoints_is_answered_429():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer nwa_not-a-token")
    assert [client.get("/api/agent/checks/").status_code for _ in range(LIMIT)] == [401] * LIMIT
    locked = client.get("/api/agent/checks/")
    assert locked.status_code == 429 and "Retry-After" in locked


def test_join_token_guessing_is_answered_429():
    client = Client()

    def join(token: str) -> int:
        return client.post(
            "/api/agent/join/", {"join_token": token, "hostname": "gpu-x"}, content_type="application/json"
        ).status_code

    assert [join(f"nwj_{uuid.uuid4().hex}") for _ in range(LIMIT)] == [401] * LIMIT
    assert join("nwj_whatever") == 429


def test_a_forwarded_address_counts_only_behind_a_trusted_proxy(settings, viewer):
    # Without NODEWARDEN_TRUSTED_PROXIES a client cannot dodge the count by writing X-Forwarded-For.
    client = APIClient()
    for i in range(LIMIT):
        client.credentials(HTTP_AUTHORIZATION="Token guess", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
        assert client.get("/api/nodes/").status_code == 401
    assert client.get("/api/nodes/").status_code == 429
    # Behind one trusted proxy, the address the proxy saw is the client.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    client.credentials(HTTP_AUTHORIZATION="Token guess", HTTP_X_FORWARDED_FOR="198.51.100.77")
    assert client.get("/api/nodes/").status_code == 401


@pytest.mark.redis
def test_the_count_is_shared_through_redis(settings):
    """Every gunicorn worker sees one count when the cache is Redis (REDIS_URL in production)."""
    url = require_service("REDIS_URL", "Redis")
    from django.core.cache import caches

    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": f"nw-test-{uuid.uuid4().hex}",
        }
    }
    addr = "192.0.2.44"
    assert [_api("guess", addr=addr) for _ in range(LIMIT)] == [401] * LIMIT
    caches["default"].close()  # a fresh connection, as another worker would have
    assert _api("guess", addr=addr) == 429  # its keys expire with the window: never flush a shared Redis
