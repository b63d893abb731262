"""Celery tasks of the scheduler reactions: small, idempotent, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from . import reactions


@shared_task(ignore_result=True)
def follow_drains() -> dict[str, int]:
    """Retry reactions owed to schedulers and move drains on (beat, every minute)."""
    return reactions.follow_drains()
