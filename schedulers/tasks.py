"""Celery tasks of the scheduler reactions: small, idempotent, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from . import reactions


@shared_task(ignore_result=True)
def apply_gpu_fence(node_id: int, indices: list[int], fenced: bool, reason: str) -> str:
    """Tell a node's scheduler of GPUs fenced or given back; re-reads their health (idempotent)."""
    return reactions.apply_gpu_fence(node_id, indices, fenced=fenced, reason=reason)


@shared_task(ignore_result=True)
def follow_drains() -> dict[str, int]:
    """Retry reactions owed to schedulers and move drains on (beat, every minute)."""
    return reactions.follow_drains()


@shared_task(ignore_result=True)
def report_node_health(node_id: int, reason: str = "", message: str = "", warning: bool = False) -> str:
    """Show a node's health in its scheduler, with an Event (``reason``) if given (idempotent: the
    condition and labels are written only when they change)."""
    from .conditions import NodeEventNote

    note = NodeEventNote(reason, message, warning=warning) if reason else None
    return reactions.report_health(node_id, note)
