"""Celery task of trends: the daily evaluation (beat), small and idempotent."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from . import services


@shared_task(ignore_result=True)
def evaluate_trends() -> dict[str, Any]:
    """Judge every node's trends, peers and lemon score; open, refresh and clear flags (beat, daily).

    Safe to run twice: open flags are unique per (node, kind, figure) and a finding is raised
    only when a flag opens. The run is recorded as a ``TrendRun``."""
    run = services.evaluate()
    return {"run": run.pk, "nodes": run.nodes, "opened": run.opened, "refreshed": run.refreshed, "cleared": run.cleared}
