"""Celery tasks of the Day 1 pipeline: small, idempotent, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(ignore_result=True)
def advance_day1_stages() -> int:
    """Poll every open stage run (burn-in checks, soak, waiting reports) and fail stuck ones."""
    return services.advance_open_stages()
