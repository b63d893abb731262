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
