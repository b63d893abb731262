"""The agent token cache (telemetry.auth): every web process caches token lookups, and a token
revoked anywhere stops working in every process within a second, not after the cache's 120 s."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache

from telemetry import auth
from telemetry.models import AgentToken
from telemetry.testing import make_batch, make_report

from .conftest import T0

pytestmark = pytest.mark.django_db

GENERATION_KEY = getattr(auth, "GENERATION_KEY", "telemetry:agent-token-generation")


def revoke_in_another_process(node) -> None:
    """What revoke_agent_tokens does in another web process: the row, then the shared generation
    (its own process's cache is that process's business)."""
    AgentToken.objects.filter(node=node).update(revoked_at=T0)
    if cache.get(GENERATION_KEY) is None:
        cache.set(GENERATION_KEY, 0, timeout=None)
    cache.incr(GENERATION_KEY)


def test_a_token_revoked_by_another_process_stops_working_here(node, agent, monkeypatch):
    assert agent.post(make_batch(node.hostname, start=T0)).status_code == 200  # the token is cached here now
    revoke_in_another_process(node)
    monkeypatch.setattr(auth, "GENERATION_CHECK_SECONDS", 0.0, raising=False)  # the next look is due
    response = agent.post({"reports": [make_report(node.hostname, collected_at=T0 + timedelta(minutes=1))]})
    assert response.status_code == 401


def test_the_shared_generation_is_read_at_most_once_per_interval(node, agent):
    assert agent.post(make_batch(node.hostname, start=T0)).status_code == 200
    reads = []
    original = cache.get
    try:
        cache.get = lambda key, *a, **k: reads.append(key) or original(key, *a, **k)  # counts; the real cache answers
        for minute in range(1, 6):
            report = make_report(node.hostname, collected_at=T0 + timedelta(minutes=minute))
            assert agent.post({"reports": [report]}).status_code == 200
    finally:
        cache.get = original
    assert reads.count(GENERATION_KEY) <= 1  # not one round trip per request


def _request() -> object:
    from django.test import RequestFactory

    return RequestFactory().post("/api/agent/reports/")


def _nodes_with_tokens(count: int) -> list[tuple[object, str]]:
    from nodes.services import Actor
    from telemetry.services import issue_agent_token
    from tests.factories import NodeFactory

    nodes = [NodeFactory(hostname=f"gpu-load-{i:03d}") for i in range(count)]
    return [(node, issue_agent_token(node.pk, actor=Actor.system("test"))) for node in nodes]


def test_a_process_learns_every_live_token_in_one_query(django_assert_num_queries):
    """After a restart every agent of the fleet reports within 30 s: one query for all the tokens,
    not a query and a last_used write for each."""
    (first_node, first), *others = _nodes_with_tokens(4)
    assert auth.identify_agent(f"Bearer {first}", _request()).node_id == first_node.pk
    for node, token in others:
        with django_assert_num_queries(0):
            assert auth.identify_agent(f"Bearer {token}", _request()).node_id == node.pk


def test_a_token_issued_after_the_load_is_looked_up_on_its_own():
    (_, first), (node, _) = _nodes_with_tokens(2)
    auth.identify_agent(f"Bearer {first}", _request())  # every live token loaded
    from nodes.services import Actor
    from telemetry.services import issue_agent_token

    later = issue_agent_token(node.pk, actor=Actor.system("test"))
    assert auth.identify_agent(f"Bearer {later}", _request()).node_id == node.pk


def test_a_loaded_token_revoked_by_another_process_stops_working_here(monkeypatch):
    monkeypatch.setattr(auth, "GENERATION_CHECK_SECONDS", 0.0)  # every call reads the shared generation
    (_, first), (node, second) = _nodes_with_tokens(2)
    auth.identify_agent(f"Bearer {first}", _request())  # the second token is cached here too, unused
    revoke_in_another_process(node)
    with pytest.raises(auth.AgentAuthError):
        auth.identify_agent(f"Bearer {second}", _request())


def test_last_used_is_written_for_tokens_used_in_one_batched_update(monkeypatch):
    monkeypatch.setattr(auth, "LAST_USED_FLUSH_SECONDS", 0.0, raising=False)
    tokens = _nodes_with_tokens(3)
    for _node, token in tokens:
        auth.identify_agent(f"Bearer {token}", _request())
    auth.identify_agent(f"Bearer {tokens[0][1]}", _request())  # the flush is due on a request, not a timer
    assert not AgentToken.objects.filter(node__in=[n for n, _ in tokens], last_used__isnull=True).exists()


def test_a_token_used_here_is_not_locked_out_after_a_revocation_elsewhere(monkeypatch, settings):
    """Another node's revocation drops this process's cache; a token it had already seen pass
    is reloaded without asking the lockout again, so a neighbour's guessing at the same address
    does not shut out an agent that was working."""
    from nodewarden.throttling import AuthFailureThrottle

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failure": "3/min"}}
    monkeypatch.setattr(auth, "GENERATION_CHECK_SECONDS", 0.0)
    (node, good), (other, _) = _nodes_with_tokens(2)
    assert auth.identify_agent(f"Bearer {good}", _request()).node_id == node.pk
    for _ in range(3):
        AuthFailureThrottle().record_failure(_request())  # a neighbour behind the same address guessing
    revoke_in_another_process(other)
    assert auth.identify_agent(f"Bearer {good}", _request()).node_id == node.pk
