"""Fixtures for tests against the real servers bin/test starts (PostgreSQL, Redis, a Celery worker).

Locally, without bin/test, these tests skip; with CI=true a missing server fails them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from tests.conftest import IN_CI, require_service


@pytest.fixture
def real_postgres(transactional_db: None) -> dict[str, Any]:
    """The test database on the real PostgreSQL server; its connection settings are returned."""
    require_service("DATABASE_URL", "PostgreSQL")
    if connection.vendor != "postgresql":
        message = f"DATABASE_URL points at {connection.vendor}, not PostgreSQL"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return connection.settings_dict


@pytest.fixture
def real_redis_url() -> str:
    return require_service("REDIS_URL", "Redis")


def wait_until(
    condition: Callable[[], bool], *, timeout: float, what: str, explain: Callable[[], str] = lambda: ""
) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds, saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{explain()}")
        time.sleep(0.1)
