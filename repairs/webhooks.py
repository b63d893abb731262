"""Outgoing webhooks: tell external systems about ticket and case changes.

A change writes one ``WebhookDelivery`` per subscribed endpoint in its own transaction
(an outbox: no change without its notice, no notice of a change that rolled back); the
send is queued only once that transaction commits. A worker claims a due delivery with
a filtered UPDATE, POSTs it (10 s timeout), and records the answer: a 2xx is delivered,
anything else is retried with exponential backoff until NODEWARDEN_WEBHOOK_MAX_ATTEMPTS,
then failed (the admin's "retry now" starts it again).

Receivers check ``X-Nodewarden-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed
with the endpoint's secret>`` and may de-duplicate on ``X-Nodewarden-Delivery``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .choices import DeliveryStatus
from .models import WebhookDelivery, WebhookEndpoint

SIGNATURE_HEADER = "X-Nodewarden-Signature"
EVENT_HEADER = "X-Nodewarden-Event"
DELIVERY_HEADER = "X-Nodewarden-Delivery"
TIMEOUT_S = 10
# A claimed delivery is not due again for this long: a worker that dies mid-send is retried
# after it, and a sweep never sends what another worker is sending.
CLAIM_LEASE = timedelta(seconds=TIMEOUT_S + 50)
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_CAP = timedelta(hours=6)
SWEEP_BATCH = 200


def max_attempts() -> int:
    """NODEWARDEN_WEBHOOK_MAX_ATTEMPTS, 8 by default."""
    return int(settings.NODEWARDEN_WEBHOOK_MAX_ATTEMPTS)


def backoff(attempts: int) -> timedelta:
    """Wait before attempt ``attempts + 1``: 30 s, 1 min, 2 min, ... at most 6 h."""
    factor: int = 2 ** max(attempts - 1, 0)  # int ** int is Any to typeshed (it may be a float)
    return min(BACKOFF_BASE * factor, BACKOFF_CAP)


def body_of(payload: dict[str, Any]) -> bytes:
    """The exact bytes sent and signed (stable key order, so a retry sends the same body)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def queue_event(event: str, payload: dict[str, Any]) -> list[int]:
    """Write a delivery for every active endpoint subscribed to ``event``, inside the caller's
    transaction, and send them once it commits. Returns the deliveries' ids."""
    endpoints = [e for e in WebhookEndpoint.objects.filter(active=True).only("id", "events") if event in e.events]
    deliveries = WebhookDelivery.objects.bulk_create(
        [WebhookDelivery(endpoint=e, event=event, payload=payload) for e in endpoints]
    )
    ids = [d.pk for d in deliveries]
    if ids:
        transaction.on_commit(lambda: _send_later(ids))
    return ids


def _send_later(ids: Iterable[int]) -> None:
    from .tasks import deliver_webhook

    for pk in ids:
        deliver_webhook.delay(pk)


def due_delivery_ids(limit: int = SWEEP_BATCH) -> list[int]:
    """Pending deliveries whose time has come, oldest first (bounded: one sweep, one batch)."""
    return list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now())
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def attempt_delivery(delivery_id: int) -> WebhookDelivery | None:
    """Claim the delivery if it is due, POST it, record the answer. None if it was not due
    (delivered, failed, waiting for its retry, or claimed by another worker)."""
    now = timezone.now()
    # Compare-and-swap: of two workers, only the one whose UPDATE changed the row sends.
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id,
        status=DeliveryStatus.PENDING,
        next_attempt_at__lte=now,
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + CLAIM_LEASE)
    if not claimed:
        return None
    delivery = WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)
    error = _post(delivery) if delivery.endpoint.active else "Endpoint is inactive."
    finished = timezone.now()
    if error is None:
        delivery.status, delivery.delivered_at, delivery.last_error = DeliveryStatus.DELIVERED, finished, ""
    else:
        delivery.last_error = error[:2000]
        if delivery.attempts >= max_attempts() or not delivery.endpoint.active:
            delivery.status = DeliveryStatus.FAILED
        else:
            delivery.next_attempt_at = finished + backoff(delivery.attempts)
    delivery.save(update_fields=["status", "delivered_at", "last_error", "next_attempt_at"])
    return delivery


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not a delivery (and urllib would turn the POST into a GET)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post(delivery: WebhookDelivery) -> str | None:
    """POST the signed payload; None on a 2xx, else what went wrong."""
    body = body_of(delivery.payload)
    request = urllib.request.Request(  # noqa: S310 - an operator's WebhookEndpoint.url (URLField: http(s)/ftp(s), never file:)
        delivery.endpoint.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Nodewarden-Webhook/1",
            EVENT_HEADER: delivery.event,
            DELIVERY_HEADER: str(delivery.pk),
            SIGNATURE_HEADER: sign(delivery.endpoint.secret, body),
        },
    )
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            status = response.status
            excerpt = response.read(300)
    except urllib.error.HTTPError as exc:
        status, excerpt = exc.code, exc.read(300) if exc.fp is not None else b""
    except (OSError, ValueError) as exc:  # refused, timed out, DNS, bad URL
        return f"{type(exc).__name__}: {exc}"
    if 200 <= status < 300:
        return None
    return f"HTTP {status}: {excerpt.decode(errors='replace')}".strip()


def retry_now(ids: Iterable[int]) -> int:
    """Send pending or failed deliveries again now, with a fresh budget of attempts (admin action)."""
    ids = list(ids)
    with transaction.atomic():
        count = WebhookDelivery.objects.filter(
            pk__in=ids, status__in=[DeliveryStatus.PENDING, DeliveryStatus.FAILED]
        ).update(status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=timezone.now())
        transaction.on_commit(lambda: _send_later(ids))
    return count


# --- What a delivery says ----------------------------------------------------------
def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _url(name: str, pk: int) -> str:
    from django.urls import reverse

    return str(settings.PORTAL_URL).rstrip("/") + reverse(name, args=[pk])


def ticket_data(ticket: Any) -> dict[str, Any]:
    """A ticket as webhooks (and any external ticketing system) see it."""
    return {
        "id": ticket.pk,
        "url": _url("repair-detail", ticket.pk),
        "node_id": ticket.node_id,
        "hostname": ticket.hostname,
        "site": ticket.site,
        "rack": ticket.rack,
        "rack_unit": ticket.rack_unit,
        "component": ticket.component,
        "what": ticket.what,
        "state": ticket.state,
        "assignee": ticket.assignee,
        "opened_by": ticket.opened_by_name,
        "notes": ticket.notes,
        "finding_id": ticket.finding_id,
        "remediation_id": ticket.remediation_id,
        "created": _iso(ticket.created),
        "updated": _iso(ticket.updated),
        "resolved_at": _iso(ticket.resolved_at),
    }


def case_data(case: Any) -> dict[str, Any]:
    """An RMA case as webhooks see it."""
    return {
        "id": case.pk,
        "url": _url("rma-detail", case.pk),
        "node_id": case.node_id,
        "hostname": case.hostname,
        "vendor": case.vendor,
        "part": case.part,
        "failed_serial": case.failed_serial,
        "replacement_serial": case.replacement_serial,
        "vendor_case_number": case.vendor_case_number,
        "state": case.state,
        "outcome": case.outcome,
        "opened_by": case.opened_by_name,
        "notes": case.notes,
        "created": _iso(case.created),
        "updated": _iso(case.updated),
        "shipped_at": _iso(case.shipped_at),
        "returned_at": _iso(case.returned_at),
        "closed_at": _iso(case.closed_at),
    }


def payload(event: str, obj: Any, change: Any) -> dict[str, Any]:
    """The body of one event: the record as it is now, and the change that made it so."""
    from .models import RepairTicket

    record = {"ticket": ticket_data(obj)} if isinstance(obj, RepairTicket) else {"rma_case": case_data(obj)}
    return {
        "event": event,
        "occurred_at": _iso(change.created),
        **record,
        "change": {
            "verb": change.verb,
            "from": change.from_state,
            "to": change.to_state,
            "actor": change.actor_name,
            "reason": change.reason,
        },
    }
