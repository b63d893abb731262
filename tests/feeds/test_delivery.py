"""Webhook delivery of node events as signed CloudEvents, against a real HTTP receiver."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from feeds import delivery
from feeds.choices import DeadLetterStatus
from feeds.events import advance_horizon
from feeds.models import DeadLetter, Subscription
from feeds.services import subscribe
from feeds.tasks import deliver_events
from nodes.choices import EventKind, NodeState
from nodes.services import Actor, perform, record_event
from tests.factories import ClusterFactory, NodeFactory

from .conftest import SECRET

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


def _subscribe(operator, receiver, **filters):
    return subscribe(operator, url=receiver.url, secret=SECRET, **filters)


def _sweep(now=None):
    advance_horizon()
    return [delivery.deliver(pk, now=now) for pk in delivery.due_subscription_ids(now=now)]


def test_a_transition_reaches_the_receiver_as_a_signed_cloudevent(operator, receiver, production_node):
    _subscribe(operator, receiver)
    event = perform(production_node.pk, "cordon", actor=SYSTEM, reason="XID 79")
    assert deliver_events() == {"delivered": 1, "redelivered": 0}
    assert receiver.signatures_ok == [True]
    assert receiver.content_types == ["application/cloudevents-batch+json"]
    (ce,) = receiver.accepted
    assert ce["specversion"] == "1.0"
    assert ce["id"] == str(event.pk)
    assert ce["type"] == "io.nodewarden.node.transition"
    assert ce["source"] == f"/nodewarden/nodes/{production_node.pk}"
    assert ce["subject"] == "gpu-feed-001"
    assert ce["data"]["target_state"] == event.target_state != ""
    assert ce["data"]["tenant"] == "acme" and ce["data"]["cluster"] == "c-east"
    assert ce["data"]["reason"] == "XID 79"


def test_a_signature_over_another_body_or_secret_does_not_verify():
    header = delivery.sign(SECRET, b"[]", 1_700_000_000)
    assert delivery.verify(SECRET, b"[]", header, now=1_700_000_000)
    assert not delivery.verify(SECRET, b"[{}]", header, now=1_700_000_000)
    assert not delivery.verify("another-secret-0123456789", b"[]", header, now=1_700_000_000)
    assert not delivery.verify(SECRET, b"[]", header, now=1_700_000_000 + 3600)  # replayed later


def test_filters_by_tenant_cluster_and_type_deliver_only_what_matches(
    operator, receiver, production_node, other_tenant
):
    _subscribe(
        operator,
        receiver,
        tenant=production_node.tenant,
        cluster=production_node.cluster,
        event_types=["io.nodewarden.node.note"],
    )
    foreign = NodeFactory(tenant=other_tenant, cluster=production_node.cluster, state=NodeState.PRODUCTION)
    other_cluster = NodeFactory(tenant=production_node.tenant, cluster=ClusterFactory(), state=NodeState.PRODUCTION)
    wanted = record_event(production_node.pk, EventKind.NOTE, actor=SYSTEM, reason="wanted")
    perform(production_node.pk, "cordon", actor=SYSTEM, reason="a transition: another type")
    record_event(foreign.pk, EventKind.NOTE, actor=SYSTEM, reason="another tenant")
    record_event(other_cluster.pk, EventKind.NOTE, actor=SYSTEM, reason="another cluster")
    _sweep()
    assert receiver.ids() == [str(wanted.pk)]


def test_a_receiver_failing_twice_gets_the_event_once_after_retries(operator, receiver, production_node):
    subscription = _subscribe(operator, receiver)
    receiver.statuses = [500, 503]
    event = record_event(production_node.pk, EventKind.FINDING, actor=SYSTEM, reason="XID 79")
    now = timezone.now()
    assert _sweep(now) == ["retry"]
    assert _sweep(now) == []  # backing off: not due yet
    assert _sweep(now + timedelta(seconds=5)) == ["retry"]
    subscription.refresh_from_db()
    assert subscription.failures == 2 and subscription.next_attempt_at == now + timedelta(seconds=5 + 10)
    assert _sweep(now + timedelta(seconds=15)) == ["delivered"]
    assert _sweep(now + timedelta(seconds=30)) == ["idle"]
    assert receiver.attempts == [500, 503, 204]
    assert receiver.ids() == [str(event.pk)]


def test_a_receiver_always_failing_ends_in_dead_letters_and_redeliver_works(
    operator, receiver, production_node, settings
):
    settings.NODEWARDEN_FEED_MAX_ATTEMPTS = 3
    subscription = _subscribe(operator, receiver)
    receiver.statuses = [500] * 3
    event = record_event(production_node.pk, EventKind.ACTION, actor=SYSTEM, reason="reboot")
    now = timezone.now()
    outcomes = [_sweep(now + timedelta(minutes=i)) for i in range(4)]
    assert outcomes == [["retry"], ["retry"], ["dead"], ["idle"]]
    letter = DeadLetter.objects.get()
    assert (letter.event_id, letter.status, letter.attempts) == (event.pk, DeadLetterStatus.DEAD, 3)
    assert "HTTP 500" in letter.last_error
    subscription.refresh_from_db()
    assert subscription.cursor >= event.pk and subscription.failures == 0  # the feed moved on
    assert receiver.accepted == []
    assert delivery.queue_redelivery([letter.pk]) == 1
    assert deliver_events()["redelivered"] == 1
    letter.refresh_from_db()
    assert letter.status == DeadLetterStatus.DELIVERED
    assert receiver.ids() == [str(event.pk)] and receiver.signatures_ok[-1]


def test_an_event_whose_transaction_commits_late_is_not_skipped(operator, receiver, production_node, settings):
    """Ids are taken at insert, not at commit: a later id may be visible first. The horizon holds
    at the gap until it has been seen for the settle time."""
    settings.NODEWARDEN_FEED_SETTLE_SECONDS = 30
    _subscribe(operator, receiver)
    first = record_event(production_node.pk, EventKind.NOTE, actor=SYSTEM, reason="first")
    start = timezone.now()
    advance_horizon(start)
    advance_horizon(start + timedelta(seconds=31))  # past any gap before our events
    # Stand-in for a transaction still open: take an id, delete the row (as if not yet visible).
    late = record_event(production_node.pk, EventKind.NOTE, actor=SYSTEM, reason="late")
    after = record_event(production_node.pk, EventKind.NOTE, actor=SYSTEM, reason="after")
    late_fields = {f: getattr(late, f) for f in ("node_id", "hostname", "kind", "reason", "actor_kind", "actor_name")}
    from nodes.models import NodeEvent

    NodeEvent.objects.filter(pk=late.pk)._raw_delete(NodeEvent.objects.db)
    assert advance_horizon(start + timedelta(seconds=32)) == first.pk  # held at the gap
    NodeEvent.objects.create(pk=late.pk, **late_fields)  # "commits"
    assert advance_horizon(start + timedelta(seconds=33)) == after.pk
    assert Subscription.objects.get().cursor < late.pk
