"""Celery task of the fleet auditor (beat), small and idempotent."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from . import services


@shared_task(ignore_result=True)
def audit_fleet() -> dict[str, Any]:
    """Compare what Nodewarden believes with the world; record the run, raise and clear audit
    findings (beat, every NODEWARDEN_AUDIT_MINUTES). Safe to run twice: a breach already raised
    only refreshes its alert."""
    run = services.run_audit(source="beat")
    return {"run": run.pk, "breaches": run.breach_total, "by_invariant": run.breaches_by_invariant()}
