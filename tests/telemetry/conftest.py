"""Fixtures for telemetry tests: a reporting node, its agent token, and a client posting as it."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from nodes.services import Actor
from telemetry.auth import forget_cached_tokens
from telemetry.services import issue_agent_token
from tests.factories import NodeFactory

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_token_cache():
    # identify_agent caches lookups in-process; a token from another test must not leak in.
    forget_cached_tokens()
    yield
    forget_cached_tokens()


@pytest.fixture
def node(db):
    return NodeFactory(hostname="gpu-a-001")


@pytest.fixture
def token(node):
    return issue_agent_token(node.pk, actor=Actor.system("test"))


class AgentClient:
    """Posts ReportBatch bodies to /api/agent/reports/ the way the node agent does."""

    url = "/api/agent/reports/"

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def post(self, body: Any, *, token: str | None = "default", gzipped: bool = False, **headers: str) -> Any:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        if gzipped:
            raw = gzip.compress(raw)
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        bearer = self.token if token == "default" else token
        if bearer is not None:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {bearer}"
        return self.client.post(self.url, raw, content_type="application/json", **headers)


@pytest.fixture
def agent(token):
    return AgentClient(token)
