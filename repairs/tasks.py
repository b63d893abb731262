"""Background work of the repairs app: sending webhook deliveries. Tasks take ids, claim
their row before acting, and do nothing when run twice."""

from __future__ import annotations

from celery import shared_task

from . import webhooks


@shared_task(ignore_result=True, acks_late=True)
def deliver_webhook(delivery_id: int) -> str:
    """One attempt at one delivery (a no-op unless it is pending and due)."""
    delivery = webhooks.attempt_delivery(delivery_id)
    return "not due" if delivery is None else delivery.status


@shared_task(ignore_result=True)
def send_due_webhooks() -> int:
    """Beat, every minute: queue an attempt for each pending delivery whose retry time has come."""
    ids = webhooks.due_delivery_ids()
    for pk in ids:
        deliver_webhook.delay(pk)
    return len(ids)
