"""Celery tasks of the Day 1 pipeline: small, idempotent, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(ignore_result=True)
def advance_day1_stages() -> int:
    """Poll every open stage run (burn-in checks, soak, waiting reports) and fail stuck ones; begin
    the stage of a node whose follow-up was lost."""
    return services.advance_open_stages() + services.begin_orphaned_stages()
