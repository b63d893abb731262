"""Fixtures for telemetry tests: a reporting node, its agent token, and a client posting as it."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from nodes.services import Actor
from telemetry.auth import forget_cached_tokens
from telemetry.services import issue_agent_token
from tests.factories import NodeFactory

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def race_an_open_transaction(hold: Callable[[], Any], racer: Callable[[], Any], waits_for: str) -> list[BaseException]:
    """PostgreSQL: ``hold`` runs in a transaction of its own, left open until ``racer`` (on another
    connection, started once ``hold`` is done) has been seen waiting on it for a second; then it
    commits and both finish. Returns what either raised (asserted empty by the caller)."""
    held, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_open() -> None:
        try:
            with transaction.atomic():
                hold()
                held.set()
                release.wait(10)  # committed only once the racer waits on what it wrote
        except BaseException as exc:  # reported by the caller, in the test's thread
            errors.append(exc)
            held.set()
        finally:
            connection.close()

    def race() -> None:
        try:
            racer()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_open)
    holder.start()
    assert held.wait(10)
    other = threading.Thread(target=race)
    other.start()
    other.join(1.0)
    assert other.is_alive(), waits_for
    release.set()
    holder.join(10)
    other.join(10)
    return errors


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
