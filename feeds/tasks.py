"""Background work of the event feed: the delivery sweep. Idempotent: every step claims its row."""

from __future__ import annotations

from celery import shared_task

from . import delivery
from .events import advance_horizon


@shared_task(ignore_result=True)
def deliver_events() -> dict[str, int]:
    """Beat, every few seconds: advance the settled horizon, give each due subscription one
    attempt (one batch), and send the dead letters queued for redelivery."""
    advance_horizon()
    outcomes: dict[str, int] = {}
    for pk in delivery.due_subscription_ids():
        outcome = delivery.deliver(pk)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    outcomes["redelivered"] = delivery.redeliver_queued()
    return outcomes
