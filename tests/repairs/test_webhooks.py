"""Outgoing webhooks against a real HTTP server on 127.0.0.1: signed, sent after commit,
retried with backoff on errors, given up after NODEWARDEN_WEBHOOK_MAX_ATTEMPTS, retried by hand."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from nodes.choices import NodeState
from repairs import services, tasks, webhooks
from repairs.choices import DeliveryStatus, WebhookEvent
from repairs.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db
S = NodeState
SECRET = "correct horse battery staple"


def endpoint(url: str, events: list[str] | None = None) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(name="itsm", url=url, secret=SECRET, events=events or WebhookEvent.values)


def sweep_after(delivery: WebhookDelivery) -> WebhookDelivery:
    """Let the delivery's retry time pass, run the beat task, return the delivery as it is then."""
    delivery.refresh_from_db()
    with time_machine.travel(delivery.next_attempt_at + timedelta(seconds=1), tick=False):
        tasks.send_due_webhooks()
    delivery.refresh_from_db()
    return delivery


def test_it_is_delivered_on_the_second_attempt_after_a_500_with_a_valid_signature(
    hook_server, eager, node_in, ticket_on
):
    hook_server.answers = [500, 200]
    endpoint(hook_server.url)
    node = node_in(S.PRODUCTION)
    with eager():
        ticket = ticket_on(node, "PSU 2")
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert delivery.last_error == "HTTP 500: upstream exploded"
    assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=20)  # backing off, not hammering

    delivery = sweep_after(delivery)
    assert (delivery.status, delivery.attempts, delivery.last_error) == (DeliveryStatus.DELIVERED, 2, "")
    assert delivery.delivered_at is not None
    assert len(hook_server.received) == 2
    headers, body = hook_server.received[-1]
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Nodewarden-Signature"], expected)
    assert headers["X-Nodewarden-Event"] == "ticket.opened"
    assert headers["X-Nodewarden-Delivery"] == str(delivery.pk)
    assert headers["Content-Type"] == "application/json"
    sent = hook_server.payloads()[-1]
    assert sent["event"] == "ticket.opened" and sent["ticket"]["id"] == ticket.pk
    assert sent["ticket"]["component"] == "PSU 2" and sent["ticket"]["rack_unit"] == 12
    assert hook_server.received[0][1] == body  # a retry sends the same bytes


def test_a_down_server_is_retried_then_the_delivery_fails(dead_url, eager, node_in, ticket_on, settings):
    settings.NODEWARDEN_WEBHOOK_MAX_ATTEMPTS = 3
    endpoint(dead_url)
    with eager():
        ticket_on(node_in(S.TRIAGE))
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert "Connection refused" in delivery.last_error
    first_wait = delivery.next_attempt_at - timezone.now()
    delivery = sweep_after(delivery)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 2)
    delivery = sweep_after(delivery)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 3)
    assert delivery.delivered_at is None and "refused" in delivery.last_error
    assert first_wait <= timedelta(seconds=31)
    # Failed is final: the sweep leaves it alone.
    with time_machine.travel(timezone.now() + timedelta(days=1)):
        assert tasks.send_due_webhooks() == 0


def test_retry_now_gives_a_failed_delivery_a_fresh_start(hook_server, eager, node_in, ticket_on, settings):
    settings.NODEWARDEN_WEBHOOK_MAX_ATTEMPTS = 1
    hook_server.answers = [503]
    endpoint(hook_server.url)
    with eager():
        ticket_on(node_in(S.TRIAGE))
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED
    with eager():
        assert webhooks.retry_now([delivery.pk]) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 1)


def test_nothing_is_sent_before_the_change_commits(hook_server, node_in, ticket_on, django_capture_on_commit_callbacks):
    endpoint(hook_server.url)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ticket_on(node_in(S.TRIAGE))
    assert WebhookDelivery.objects.count() == 1 and callbacks  # written with the change, queued for commit
    assert hook_server.received == []


def test_an_endpoint_gets_only_the_events_it_subscribed_to(hook_server, eager, node_in, ticket_on, as_operator):
    endpoint(hook_server.url, events=[WebhookEvent.TICKET_RESOLVED])
    with eager():
        ticket = ticket_on(node_in(S.TRIAGE), started=True)
        services.resolve_repair(ticket.pk, actor=as_operator, reason="GPU swapped")
    (sent,) = hook_server.payloads()
    assert sent["event"] == "ticket.resolved" and sent["change"]["reason"] == "GPU swapped"


def test_a_delivery_is_sent_once_even_if_two_workers_try(hook_server, node_in, ticket_on):
    endpoint(hook_server.url)
    ticket_on(node_in(S.TRIAGE))
    delivery = WebhookDelivery.objects.get()
    assert webhooks.attempt_delivery(delivery.pk).status == DeliveryStatus.DELIVERED
    assert webhooks.attempt_delivery(delivery.pk) is None
    assert len(hook_server.received) == 1


def test_a_redirect_is_not_a_delivery(hook_server, node_in, ticket_on):
    hook_server.answers = [302]
    endpoint(hook_server.url)
    ticket_on(node_in(S.TRIAGE))
    delivery = webhooks.attempt_delivery(WebhookDelivery.objects.get().pk)
    assert delivery.status == DeliveryStatus.PENDING and delivery.last_error.startswith("HTTP 302")


def test_backoff_doubles_and_is_capped():
    assert [webhooks.backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert webhooks.backoff(30) == timedelta(hours=6)


def test_max_attempts_follows_the_setting(settings):
    settings.NODEWARDEN_WEBHOOK_MAX_ATTEMPTS = 5
    assert webhooks.max_attempts() == 5
