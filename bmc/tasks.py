"""Celery task of the BMC app (beat): the power poller, small and idempotent."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(ignore_result=True)
def poll_power_states() -> dict[str, int]:
    """Read the power state of the least recently polled BMC endpoints (beat, every
    NODEWARDEN_BMC_POLL_EVERY seconds), so every node page shows a power state read lately."""
    result = services.poll_power_states()
    return {"tried": result.tried, "answered": result.answered, "never_polled": result.never_polled}
