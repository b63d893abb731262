"""Racing joins with one join token, on the real PostgreSQL server.

Eight threads, each with its own connection, wait at a barrier and then join with the
same token at the same moment. The compare-and-swap UPDATE in ``services.join`` must let
exactly one through: one agent token, one transition to onboard, every other join
refused as "already used". SQLite serialises writers, so only PostgreSQL can show a
double use here.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from nodes.choices import NodeState
from nodes.models import NodeEvent
from provisioning import services
from provisioning.models import JoinToken
from telemetry.models import AgentToken
from tests.conftest import IN_CI, require_service
from tests.factories import NodeFactory

from .conftest import provision

pytestmark = pytest.mark.postgres
WORKERS = 8
ROUNDS = 3


@pytest.fixture
def real_postgres(transactional_db: None) -> None:
    require_service("DATABASE_URL", "PostgreSQL")
    if connection.vendor != "postgresql":
        message = f"DATABASE_URL points at {connection.vendor}, not PostgreSQL"
        pytest.fail(message) if IN_CI else pytest.skip(message)


def race(token: str, hostname: str) -> list[Any]:
    """WORKERS joins with one token, released together; a refusal is returned, not raised."""
    start_line = threading.Barrier(WORKERS)

    def attempt(index: int) -> Any:
        try:
            connection.ensure_connection()  # before the barrier: set-up must not stagger the start
            start_line.wait(timeout=30)
            return services.join(token, hostname=hostname, agent_facts={"racer": index})
        except services.JoinRefused as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(attempt, range(WORKERS)))


@pytest.mark.usefixtures("real_postgres")
def test_of_eight_simultaneous_joins_with_one_token_exactly_one_succeeds():
    for round_ in range(ROUNDS):
        node = NodeFactory(state=NodeState.ENROLLED)
        _, token = provision(node)

        outcomes = race(token, node.hostname)

        joined = [o for o in outcomes if isinstance(o, services.JoinResult)]
        refused = [o for o in outcomes if isinstance(o, services.JoinRefused)]
        assert len(joined) == 1, f"round {round_}: {outcomes}"
        assert len(refused) == WORKERS - 1 and all(isinstance(o, services.JoinTokenUsed) for o in refused), outcomes
        assert list(AgentToken.objects.filter(node=node).values_list("prefix", flat=True)) == [
            joined[0].agent_token[:12]
        ]
        assert NodeEvent.objects.filter(node=node, transition="mark_onboard").count() == 1
        node.refresh_from_db()
        assert node.state == NodeState.ONBOARD
        assert JoinToken.objects.get(node=node).used_at is not None
