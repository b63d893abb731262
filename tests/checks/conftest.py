"""Fixtures for active checks: an idle node with a live agent token, and API clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nodes.services import Actor
from telemetry.auth import forget_cached_tokens
from telemetry.models import NodeHealth
from telemetry.services import issue_agent_token
from tests.factories import NodeFactory

# The Kubernetes stand-in, for the scheduler hold tests (test_scheduler_hold); Slurm: tests/conftest.py.
from tests.schedulers.kube_stand_in import kube_fixture  # noqa: F401  (the `kube` fixture)


@pytest.fixture(autouse=True)
def _fresh_token_cache() -> Iterator[None]:
    """The token lookup is cached per process; tests must not see each other's tokens."""
    forget_cached_tokens()
    yield
    forget_cached_tokens()


def report_health(node: Any, *, processes: int | None = 0, age: timedelta = timedelta(seconds=5)) -> NodeHealth:
    """Store the node's latest report as telemetry would: ``processes`` GPU compute processes, ``age`` old."""
    at = timezone.now() - age
    health, _ = NodeHealth.objects.update_or_create(
        node=node,
        defaults={"last_report_at": at, "last_received_at": at, "gpu_compute_processes": processes},
    )
    return health


@pytest.fixture
def node(db, tenant):
    """A production node rented by the ``tenant`` (the customer fixture's tenant)."""
    return NodeFactory(production=True, tenant=tenant)


@pytest.fixture
def idle_node(node):
    report_health(node, processes=0)
    return node


@pytest.fixture
def agent_for() -> Callable[[Any], APIClient]:
    """An API client speaking as the given node's agent (a real token, through the real authentication)."""

    def make(node: Any) -> APIClient:
        token = issue_agent_token(node.pk, actor=Actor.system("tests"))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Bearer " + token)
        return client

    return make


@pytest.fixture
def agent(agent_for, node) -> APIClient:
    return agent_for(node)


@pytest.fixture
def api_as() -> Callable[[Any], APIClient]:
    def make(user: Any) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make
