"""Concurrent verbs on one node, on the real PostgreSQL server.

Eight threads, each with its own database connection, wait at a barrier and
then call a lifecycle verb on the same node at the same moment. The row lock in
``services._transition`` must serialise them: no lost update, one history row
per change that happened, and every loser refused cleanly.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from django.db import connection, transaction
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from nodes import services
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from tests.factories import NodeFactory

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("real_postgres")]

S = NodeState
WORKERS = 8
ROUNDS = 3


@dataclass(frozen=True)
class Outcome:
    verb: str
    event_id: int | None = None  # set when the verb succeeded
    refusal: Exception | None = None

    @property
    def won(self) -> bool:
        return self.event_id is not None


def race(node_id: int, verbs: list[str]) -> list[Outcome]:
    """Run each verb in its own thread and connection, all released at once by a barrier."""
    start_line = threading.Barrier(len(verbs))

    def attempt(index: int, verb: str) -> Outcome:
        try:
            # Connect before the barrier, so connection set-up does not stagger the start.
            connection.ensure_connection()
            start_line.wait(timeout=30)
            actor = services.Actor.system(f"racer-{index}")
            event = services.VERBS[verb](node_id, actor=actor, reason=f"race, worker {index}")
            return Outcome(verb, event_id=event.pk)
        except (TransitionNotAllowed, ConcurrentTransition) as exc:
            return Outcome(verb, refusal=exc)
        finally:
            connection.close()  # each thread opened its own connection; the test DB is dropped later

    with ThreadPoolExecutor(max_workers=len(verbs)) as pool:
        return list(pool.map(attempt, itertools.count(), verbs))


def test_of_eight_simultaneous_drain_requests_exactly_one_wins():
    for round_ in range(ROUNDS):
        node = NodeFactory(production=True)
        outcomes = race(node.pk, ["request_drain"] * WORKERS)

        winners = [o for o in outcomes if o.won]
        assert len(winners) == 1, f"round {round_}: {outcomes}"
        assert all(isinstance(o.refusal, TransitionNotAllowed | ConcurrentTransition) for o in outcomes if not o.won)
        (event,) = NodeEvent.objects.filter(node=node)
        assert event.pk == winners[0].event_id
        assert (event.source_state, event.target_state) == (S.PRODUCTION, S.DRAIN_PENDING)
        node.refresh_from_db()
        assert node.state == event.target_state


@pytest.mark.parametrize(
    ("start", "verbs"),
    [
        # A reliability verdict and a late failure report arrive together.
        (S.RELIABILITY_ASSESSMENT, ["release_to_production", "fail_validation"]),
        # An operator starts validation while another decommissions the node.
        (S.ONBOARD, ["start_validation", "decommission"]),
    ],
)
def test_of_mutually_exclusive_verbs_exactly_one_wins(start, verbs):
    """Each verb's target state allows none of the others, so one change is all there can be."""
    for round_ in range(ROUNDS):
        node = NodeFactory(state=start)
        outcomes = race(node.pk, list(itertools.islice(itertools.cycle(verbs), WORKERS)))

        winners = [o for o in outcomes if o.won]
        assert len(winners) == 1, f"round {round_}: {outcomes}"
        (event,) = NodeEvent.objects.filter(node=node)
        assert (event.pk, event.transition, event.source_state) == (winners[0].event_id, winners[0].verb, start)
        node.refresh_from_db()
        assert node.state == event.target_state


def test_mixed_verbs_from_production_apply_one_after_another_without_lost_updates():
    """cordon, start_draining and request_drain from production.

    These verbs do not exclude each other (a drain request leaves the node in
    drain_pending, from which start_draining and cordon are still allowed), so up
    to three may succeed. What must hold is that they applied one at a time: each
    history row starts where the previous one ended, and cordon, which is allowed
    all the way until triage, wins exactly once and ends the chain. That last
    part is the row lock's doing: with only the compare-and-swap guard a waiting
    cordon would fail with ConcurrentTransition instead of re-reading the node.
    """
    verbs = list(itertools.islice(itertools.cycle(["cordon", "start_draining", "request_drain"]), WORKERS))
    for round_ in range(ROUNDS):
        node = NodeFactory(production=True)
        outcomes = race(node.pk, verbs)

        winners = [o for o in outcomes if o.won]
        # Ids are allocated under the row lock, so their order is the order the changes happened.
        events = list(NodeEvent.objects.filter(node=node).order_by("pk"))
        assert sorted(o.event_id for o in winners) == [e.pk for e in events], f"round {round_}: {outcomes}"
        assert 1 <= len(events) <= 3 and len(winners) < WORKERS
        assert [e.source_state for e in events] == [S.PRODUCTION] + [e.target_state for e in events[:-1]]
        assert len({e.transition for e in events}) == len(events), "no verb wins twice"
        assert [e.transition for e in events].count("cordon") == 1 and events[-1].transition == "cordon"
        node.refresh_from_db()
        assert node.state == events[-1].target_state == S.TRIAGE


def test_the_compare_and_swap_guard_refuses_a_save_from_a_stale_copy():
    """Without the row lock, ConcurrentTransitionMixin's filtered UPDATE is the last line of defence."""
    node = NodeFactory(production=True)
    first, second = Node.objects.get(pk=node.pk), Node.objects.get(pk=node.pk)
    first.request_drain()
    first.save()
    after_first = Node.objects.values().get(pk=node.pk)

    second.cordon()  # allowed on its stale view of the node (production)
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save()

    assert Node.objects.values().get(pk=node.pk) == after_first
    assert after_first["state"] == S.DRAIN_PENDING
    assert not NodeEvent.objects.exists()
