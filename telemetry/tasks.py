"""Celery tasks of the telemetry app (scheduled in nodewarden/celery.py)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.db.models import F
from django.utils import timezone

from . import commands, dcgm_exporter, packing, partitioning, retention
from .models import DcgmExporterTarget

log = logging.getLogger(__name__)
MAX_TARGETS_PER_RUN = 200


@shared_task(name="telemetry.tasks.scrape_dcgm_exporters", ignore_result=True)
def scrape_dcgm_exporters() -> dict[str, int]:
    """Scrape every enabled dcgm-exporter target that is due. Each target is claimed with a
    compare-and-swap UPDATE of ``last_scraped_at``, so two workers never scrape it twice."""
    now = timezone.now()
    targets = DcgmExporterTarget.objects.filter(enabled=True).order_by(F("last_scraped_at").asc(nulls_first=True))
    due = [
        t
        for t in targets[:MAX_TARGETS_PER_RUN]
        if t.last_scraped_at is None or now - t.last_scraped_at >= timedelta(seconds=t.interval_s)
    ]
    scraped = failed = 0
    for target in due:
        claimed = DcgmExporterTarget.objects.filter(pk=target.pk, last_scraped_at=target.last_scraped_at)
        if not claimed.update(last_scraped_at=now):
            continue  # another worker took it
        if dcgm_exporter.scrape_target(target) is None:
            failed += 1
        scraped += 1
    return {"scraped": scraped, "failed": failed}


@shared_task(name="telemetry.tasks.roll_up_and_prune", ignore_result=True)
def roll_up_and_prune() -> dict[str, Any]:
    """Hourly: keep future partitions ready, roll raw samples into hours and old hours into days, drop
    whole partitions past their window, prune the rest of old history."""
    partitioning.ensure_future_partitions()
    return asdict(retention.roll_up_and_prune())


@shared_task(name="telemetry.tasks.pack_past_hours", ignore_result=True)
def pack_past_hours() -> dict[str, Any]:
    """Hourly, after the hour's end: each node's past hour of raw rows becomes one packed row
    (its samples rolled up first); idempotent, a second run finds nothing to pack."""
    return asdict(packing.pack_past_hours())


@shared_task(name="telemetry.tasks.expire_agent_commands", ignore_result=True)
def expire_agent_commands() -> int:
    """Every minute: queued agent commands past their date become expired (never delivered later)."""
    return commands.expire_commands()
