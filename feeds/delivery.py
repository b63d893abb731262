"""Signed CloudEvents webhooks: each subscription follows the feed past its own cursor.

The beat task (feeds.tasks.deliver_events, every NODEWARDEN_FEED_INTERVAL_SECONDS) advances the
settled horizon, then gives each due subscription one attempt: the next batch of matching events
past its cursor, POSTed as ``application/cloudevents-batch+json`` (a JSON array of CloudEvents).
A cursor rather than an outbox written by each event: no signal handler, nothing to queue in the
writers' transactions, catch-up and ordering come with it, and one query answers a subscription.

A 2xx moves the cursor past the batch. Anything else retries the same batch after
NODEWARDEN_FEED_RETRY_SECONDS, doubling (at most 10 minutes); after NODEWARDEN_FEED_MAX_ATTEMPTS
failures its events become dead letters and the cursor moves on. Receivers de-duplicate on the
CloudEvent ``id`` (a retry may repeat a batch the receiver did take but answered late).

Signature (verify before trusting a body)::

    Nodewarden-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + raw body)>
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from fleet.scoping import is_operator_view
from nodes.models import NodeEvent

from . import events as feed
from .addresses import AddressRefused, check_public
from .choices import DeadLetterStatus
from .models import DeadLetter, Subscription

SIGNATURE_HEADER = "Nodewarden-Signature"
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
TIMEOUT_S = 10
# A claimed subscription is not due again for this long: a worker that dies mid-send is retried
# after it, and two sweeps never send the same batch at once.
CLAIM_LEASE = timedelta(seconds=TIMEOUT_S + 20)
BACKOFF_CAP = timedelta(minutes=10)
SWEEP_LIMIT = 500  # subscriptions per sweep, and dead letters redelivered per sweep


def batch_size() -> int:
    return int(settings.NODEWARDEN_FEED_BATCH)


def max_attempts() -> int:
    return int(settings.NODEWARDEN_FEED_MAX_ATTEMPTS)


def backoff(failures: int) -> timedelta:
    """Wait before the next attempt after ``failures`` failures: base, 2x, 4x, ... at most 10 min."""
    factor: int = 2 ** max(failures - 1, 0)
    return min(timedelta(seconds=int(settings.NODEWARDEN_FEED_RETRY_SECONDS)) * factor, BACKOFF_CAP)


def body_of(cloudevents: list[dict[str, Any]]) -> bytes:
    return json.dumps(cloudevents, separators=(",", ":"), default=str).encode()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The Nodewarden-Signature value: the timestamp is signed with the body (a replayed
    signature is only as fresh as its t=)."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance_s: int = 300, now: float | None = None) -> bool:
    """What a receiver does (Python; any language with HMAC-SHA256 does the same)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def matching(subscription: Subscription, up_to: int) -> QuerySet[NodeEvent]:
    """The events past the subscription's cursor, up to the settled horizon, that its filters take."""
    events = NodeEvent.objects.filter(pk__gt=subscription.cursor, pk__lte=up_to)
    if subscription.tenant_id:
        events = events.filter(node__tenant_id=subscription.tenant_id)
    if subscription.cluster_id:
        events = events.filter(node__cluster_id=subscription.cluster_id)
    if subscription.event_types:
        events = events.filter(kind__in=[feed.kind_of(t) for t in subscription.event_types])
    return events


def due_subscription_ids(now: datetime | None = None, limit: int = SWEEP_LIMIT) -> list[int]:
    now = now or timezone.now()
    return list(
        Subscription.objects.filter(active=True, next_attempt_at__lte=now)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def deliver(subscription_id: int, now: datetime | None = None) -> str:
    """One attempt for one subscription: "busy" (claimed elsewhere or not due), "idle" (nothing
    new), "delivered", "retry" or "dead"."""
    now = now or timezone.now()
    # Compare-and-swap: of two workers, only the one whose UPDATE changed the row sends.
    claimed = (
        Subscription.objects.filter(pk=subscription_id, active=True, next_attempt_at__lte=now)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_until=now + CLAIM_LEASE)
    )
    if not claimed:
        return "busy"
    subscription = Subscription.objects.get(pk=subscription_id)
    up_to = feed.horizon()
    batch = list(feed.for_feed(matching(subscription, up_to))[: batch_size()])
    # A short batch holds every match up to the horizon: the cursor may pass the horizon.
    cursor = up_to if len(batch) < batch_size() else batch[-1].pk
    if not batch:
        _settle(subscription_id, cursor=max(cursor, subscription.cursor))
        return "idle"
    cloudevents = [feed.cloudevent(e) for e in batch]
    error = refused_address(subscription) or post(subscription.url, subscription.secret, body_of(cloudevents))
    if error is None:
        _settle(
            subscription_id,
            cursor=cursor,
            delivered_count=F("delivered_count") + len(batch),
            last_delivered_at=timezone.now(),
            last_error="",
        )
        return "delivered"
    failures = subscription.failures + 1
    if failures < max_attempts():
        _settle(subscription_id, failures=failures, next_attempt_at=now + backoff(failures), last_error=error)
        return "retry"
    DeadLetter.objects.bulk_create(
        [
            DeadLetter(
                subscription_id=subscription_id,
                event_id=int(ce["id"]),
                event_type=ce["type"],
                cloudevent=ce,
                attempts=failures,
                last_error=error,
            )
            for ce in cloudevents
        ],
        ignore_conflicts=True,  # a batch dead-lettered twice (a lost lease) keeps one row per event
    )
    _settle(subscription_id, cursor=cursor, last_error=error)
    return "dead"


def refused_address(subscription: Subscription) -> str | None:
    """Why a customer's subscription may not be sent to now (its host resolves to a non-public
    address: ``feeds.addresses``), or None. Staff-made subscriptions are trusted."""
    creator = subscription.created_by
    if creator is not None and is_operator_view(creator):
        return None
    try:
        check_public(subscription.url)
    except AddressRefused as exc:
        return f"Not sent: {exc}"
    return None


def _settle(subscription_id: int, **fields: Any) -> None:
    """Release the claim; a settled attempt starts the failure count again."""
    fields.setdefault("failures", 0)
    Subscription.objects.filter(pk=subscription_id).update(lease_until=None, **fields)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not a delivery (and urllib would turn the POST into a GET)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, secret: str, body: bytes) -> str | None:
    """POST a signed batch; None on a 2xx, else what went wrong (at most 2000 characters)."""
    request = urllib.request.Request(  # noqa: S310 - a subscription's URL (URLField: http(s)/ftp(s), never file:)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": BATCH_CONTENT_TYPE,
            "User-Agent": "Nodewarden-Feed/1",
            SIGNATURE_HEADER: sign(secret, body, int(time.time())),
        },
    )
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            status, excerpt = response.status, response.read(300)
    except urllib.error.HTTPError as exc:
        status, excerpt = exc.code, exc.read(300) if exc.fp is not None else b""
    except (OSError, ValueError) as exc:  # refused, timed out, DNS, bad URL
        return f"{type(exc).__name__}: {exc}"[:2000]
    if 200 <= status < 300:
        return None
    return f"HTTP {status}: {excerpt.decode(errors='replace')}".strip()[:2000]


# --- Dead letters ------------------------------------------------------------------
def queue_redelivery(ids: Iterable[int]) -> int:
    """Queue dead letters for the next sweep (the redeliver action; a delivered one stays so)."""
    return DeadLetter.objects.filter(pk__in=list(ids), status=DeadLetterStatus.DEAD).update(
        status=DeadLetterStatus.QUEUED, updated=timezone.now()
    )


def redeliver_queued(limit: int = SWEEP_LIMIT) -> int:
    """One attempt at each queued dead letter (each on its own: they are rare and out of order
    by nature); returns how many got through. A failure leaves it dead with the new error."""
    sent = 0
    for letter_id in DeadLetter.objects.filter(status=DeadLetterStatus.QUEUED).values_list("pk", flat=True)[:limit]:
        # Claim: back to dead before sending, so a crashed worker never sends it twice unasked.
        if not DeadLetter.objects.filter(pk=letter_id, status=DeadLetterStatus.QUEUED).update(
            status=DeadLetterStatus.DEAD, attempts=F("attempts") + 1, updated=timezone.now()
        ):
            continue
        letter = DeadLetter.objects.select_related("subscription").get(pk=letter_id)
        error = post(letter.subscription.url, letter.subscription.secret, body_of([letter.cloudevent]))
        if error is None:
            DeadLetter.objects.filter(pk=letter_id).update(status=DeadLetterStatus.DELIVERED, last_error="")
            sent += 1
        else:
            DeadLetter.objects.filter(pk=letter_id).update(last_error=error)
    return sent
