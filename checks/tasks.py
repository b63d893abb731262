"""Periodic work of the checks app."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task
def expire_stale_checks() -> int:
    """Mark claimed active checks past their deadline as errors (the agent died or lost the run).

    Idempotent and safe to overlap: each run is expired with a compare-and-swap update.
    """
    return services.expire_stale_checks()
