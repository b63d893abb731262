"""Webhook subscriptions to node events, the feed's horizon, and dead letters.

The events themselves are ``nodes.NodeEvent`` rows: the feed adds no copy of them. A subscription
keeps a cursor (the last event id it has settled), so delivery is ordered, catches up after an
outage and never needs a signal handler.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from fleet.models import Cluster, Tenant

from .choices import DeadLetterStatus


class FeedHorizon(models.Model):
    """One row: the highest NodeEvent id below which every id is settled (committed or rolled
    back), so readers past a cursor never skip an event that commits late.

    Ids are taken when a row is inserted, not when it commits: id 11 can be visible before id 10.
    A gap is held until it has been seen for NODEWARDEN_FEED_SETTLE_SECONDS; by then the
    transaction that took the missing id has committed or rolled back.
    """

    last_id = models.BigIntegerField(default=0)
    # The highest id visible when a gap was first seen, and when: every id up to it was taken
    # before that moment.
    pending_max_id = models.BigIntegerField(null=True, blank=True)
    pending_seen_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"feed horizon at event {self.last_id}"


class Subscription(models.Model):
    """A webhook that receives node events as CloudEvents, filtered by tenant, cluster and type.

    A customer's subscription is always bound to the customer's own tenant. Deliveries are
    batched, signed with ``secret`` and retried with back-off; after
    NODEWARDEN_FEED_MAX_ATTEMPTS failures the batch becomes dead letters and the cursor moves on.
    """

    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200, help_text="HMAC-SHA256 key of the Nodewarden-Signature header.")
    description = models.CharField(max_length=200, blank=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    event_types = models.JSONField(default=list, blank=True, help_text="CloudEvents types; empty: every type.")
    active = models.BooleanField(default=True)
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    # Delivery state, written only by feeds.delivery (a claim is a filtered UPDATE on lease_until).
    cursor = models.BigIntegerField(default=0, help_text="The last event id settled for this subscription.")
    failures = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_count = models.PositiveBigIntegerField(default=0)
    last_delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["active", "next_attempt_at"])]

    def __str__(self) -> str:
        return self.url


class DeadLetter(models.Model):
    """One event a subscription could not deliver after every attempt, kept with its exact
    CloudEvent and the last error until an operator (or the customer) redelivers it."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="dead_letters")
    event_id = models.BigIntegerField(help_text="The NodeEvent id (the CloudEvent's id).")
    event_type = models.CharField(max_length=100)
    cloudevent = models.JSONField()
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=DeadLetterStatus.choices, default=DeadLetterStatus.DEAD)
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["subscription", "event_id"], name="deadletter_once_per_event")]
        indexes = [models.Index(fields=["status", "id"])]

    def __str__(self) -> str:
        return f"event {self.event_id} for {self.subscription_id}"
