"""The demo churn task: a few plausible changes a minute, only through the services, only on the demo fleet."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command

from nodes.choices import EventKind, NodeState
from nodes.models import Node, NodeEvent
from sandbox.demo import TRANSITIONS, churn_demo_fleet
from tests.factories import NodeFactory

S = NodeState
SEEDED_AT = datetime(2026, 3, 14, 15, 30, tzinfo=UTC)
LATER = SEEDED_AT + timedelta(days=1)  # every seeded node has sat in its state long enough to move on
PERSON = "operator"  # the demo login the people act as

pytestmark = pytest.mark.django_db


def seed(*args: str) -> None:
    with time_machine.travel(SEEDED_AT, tick=False):
        call_command("seed_demo", "--nodes", "60", "--days", "30", "--seed", "7", *args, stdout=io.StringIO())


def churn(runs: int = 1) -> list[str]:
    """``runs`` beat ticks, ten minutes apart, each with its own seed."""
    summaries = []
    for i in range(runs):
        with time_machine.travel(LATER + timedelta(minutes=10 * i), tick=False):
            summaries.append(churn_demo_fleet(seed=i))
    return summaries


@pytest.fixture
def enabled(settings):
    settings.NODEWARDEN_DEMO_CHURN = True


def test_it_does_nothing_unless_enabled(settings):
    seed()
    settings.NODEWARDEN_DEMO_CHURN = False
    events = NodeEvent.objects.count()
    assert churn() == ["disabled"]
    assert NodeEvent.objects.count() == events


def test_it_does_nothing_without_the_demo_fleet(enabled):
    node = NodeFactory(state=S.PRODUCTION)
    assert churn() == ["no demo fleet"]
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


def test_each_run_moves_a_handful_of_nodes_through_the_services(enabled):
    seed()
    before = dict(Node.objects.values_list("pk", "state"))
    summaries = churn(runs=5)
    # The demo's people act as the demo operator (a user), through repairs' and remediation's verbs.
    moved = NodeEvent.objects.filter(actor_name=PERSON, kind=EventKind.TRANSITION, created__gte=LATER)
    assert moved.exists()
    counts = [int(summary.split()[0]) for summary in summaries]
    assert max(counts) <= 10 and sum(counts) >= moved.count(), summaries
    for event in moved:
        # The service's own row: the verb's declared road, stamped with the time of the run.
        assert TRANSITIONS[event.transition][event.source_state] == event.target_state
        assert event.created >= LATER and event.actor_kind == "user"
    changed = {pk for pk, state in Node.objects.values_list("pk", "state") if before[pk] != state}
    assert changed and changed <= set(moved.values_list("node_id", flat=True))


def test_history_stays_consistent_after_churning(enabled):
    seed()
    churn(runs=10)
    for node in Node.objects.all():
        events = NodeEvent.objects.filter(node=node, kind=EventKind.TRANSITION).order_by("created", "id")
        state = S.ENROLLED
        for event in events:
            assert event.source_state == state
            state = event.target_state
        assert state == node.state


def test_it_never_touches_nodes_outside_the_demo_sites(enabled):
    seed()
    outsider = NodeFactory(state=S.TRIAGE)
    churn(runs=10)
    outsider.refresh_from_db()
    assert outsider.state == S.TRIAGE and not NodeEvent.objects.filter(node=outsider).exists()


def test_the_same_seed_makes_the_same_changes(enabled):
    seed()
    first = churn(runs=3)
    seed("--reset")
    assert churn(runs=3) == first
