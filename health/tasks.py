"""Periodic health work: missing heartbeats, resolving XID alerts that went quiet, and telling
Alertmanager about alerts (on each change, and again every interval)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from celery import shared_task
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from nodes.choices import DAY1_STAGES, NodeState
from telemetry.models import NodeHealth

from . import alertmanager_push
from .choices import AlertState
from .gpus import suspect_named_gpu
from .models import Alert
from .ruleconfig import RuleBook
from .services import HEALTH, clear_condition, raise_finding

if TYPE_CHECKING:
    from telemetry.models import NodeHealth

log = logging.getLogger(__name__)

# States in which a node's agent must be reporting: serving, leaving service, being validated
# or triaged. Nodes in repair, RMA or remediation are expected to go dark.
REPORTING_STATES = (NodeState.PRODUCTION, NodeState.DRAIN_PENDING, NodeState.DRAINING, NodeState.TRIAGE, *DAY1_STAGES)
BATCH = 500  # nodes (or alerts) handled per run; the next run, a minute later, takes the rest
QUIET_RULES = ("xid", "xid_repeated")


@shared_task
def check_heartbeats() -> dict[str, int]:
    """Raise ``heartbeat_missing`` for nodes that stopped reporting, resolve it for nodes that left
    the reporting states, and resolve XID alerts quiet for their rule's ``clear_after_seconds``.
    Idempotent: an open alert is only refreshed."""
    now = timezone.now()
    book = RuleBook()
    raised, refreshed = _raise_missing(now, book)
    return {
        "raised": raised,
        "refreshed": refreshed,
        "left_service": _resolve_left_service(),
        "quiet_resolved": _resolve_quiet_xids(now, book),
    }


def _grace(book: RuleBook, profile_id: int | None) -> float:
    return book.config("heartbeat_missing", profile_id).threshold or 180


def _silent_since(health: NodeHealth) -> datetime:
    """Since when the node's agent owes a report: its newest report, or the node's last change of
    state if later (a node back from RMA or repair enters a reporting state with a report weeks old:
    its grace starts now, not then)."""
    return max(health.last_received_at, health.node.state_changed_at)


def _stale_nodes(now: datetime, book: RuleBook) -> list[Any]:
    """Nodes of a reporting state silent for longer than their grace (see ``_silent_since``)."""
    shortest = min([_grace(book, None), *(_grace(book, p) for p in book.rates)])
    cutoff = now - timedelta(seconds=shortest)
    rows = (
        NodeHealth.objects.filter(
            node__state__in=REPORTING_STATES, last_received_at__lt=cutoff, node__state_changed_at__lt=cutoff
        )
        .select_related("node")
        .order_by("last_received_at")[:BATCH]
    )
    return [
        h
        for h in rows
        if (now - _silent_since(h)).total_seconds() > _grace(book, h.node.hardware_profile_id)
        and book.config("heartbeat_missing", h.node.hardware_profile_id).enabled
    ]


def _raise_missing(now: datetime, book: RuleBook) -> tuple[int, int]:
    stale = _stale_nodes(now, book)
    open_ids = set(
        Alert.objects.filter(
            node_id__in=[h.node_id for h in stale], rule="heartbeat_missing", state=AlertState.FIRING
        ).values_list("node_id", flat=True)
    )
    refreshed = Alert.objects.filter(node_id__in=open_ids, rule="heartbeat_missing", state=AlertState.FIRING).update(
        last_seen=now, occurrences=F("occurrences") + 1
    )
    raised = 0
    for health in stale:
        if health.node_id in open_ids:
            continue
        cfg = book.config("heartbeat_missing", health.node.hardware_profile_id)
        silent = int((now - _silent_since(health)).total_seconds())
        raise_finding(
            health.node_id,
            rule="heartbeat_missing",
            severity=cfg.severity,
            source="heartbeat",
            recommended_action=cfg.recommended_action,
            shadow=cfg.shadow,
            observed_at=now,
            actor=HEALTH,
            summary=f"No report for {silent // 60} min {silent % 60} s (grace {cfg.threshold:g} s)",
            evidence={
                "last_received_at": health.last_received_at.isoformat(),
                "last_report_at": health.last_report_at.isoformat(),
                "silent_seconds": silent,
                "grace_seconds": cfg.threshold,
                "state": health.node.state,
            },
        )
        raised += 1
    return raised, refreshed


def _resolve_left_service() -> int:
    """A node sent to repair or RMA is expected to go dark: its heartbeat alert no longer applies."""
    alerts = (
        Alert.objects.filter(rule="heartbeat_missing", state=AlertState.FIRING)
        .exclude(node__state__in=REPORTING_STATES)
        .values_list("node_id", flat=True)[:BATCH]
    )
    return sum(
        1
        for node_id in alerts
        if clear_condition(node_id, rule="heartbeat_missing", reason="node left the reporting states")
    )


def _resolve_quiet_xids(now: datetime, book: RuleBook) -> int:
    """XIDs are events: their alerts resolve after the rule's quiet period with no new event."""
    shortest = min(book.config(rule, None).clear_after_seconds or 6 * 3600 for rule in QUIET_RULES)
    candidates = (
        Alert.objects.filter(
            rule__in=QUIET_RULES, state=AlertState.FIRING, last_seen__lt=now - timedelta(seconds=shortest)
        )
        .select_related("node")
        .order_by("last_seen")[:BATCH]
    )
    resolved = 0
    for alert in candidates:
        quiet = book.config(alert.rule, alert.node.hardware_profile_id).clear_after_seconds or 6 * 3600
        if (now - alert.last_seen).total_seconds() >= quiet and clear_condition(
            alert.node_id,
            rule=alert.rule,
            gpu_index=alert.gpu_index,
            subject=alert.subject,
            reason=f"no new event for {quiet // 3600} h",
        ):
            resolved += 1
    return resolved


@shared_task
def push_alerts_to_alertmanager(alert_ids: list[int]) -> dict[str, int]:
    """Tell every configured Alertmanager about these alerts as they are now (a verb changed them).
    A failure is counted on /metrics and healed by the next ``resend_alerts_to_alertmanager``."""
    return alertmanager_push.push_alerts(alert_ids)


@shared_task
def resend_alerts_to_alertmanager() -> dict[str, int]:
    """Every firing and lately resolved alert, to every configured Alertmanager again (beat,
    NODEWARDEN_ALERTMANAGER_RESEND_SECONDS): a restarted Alertmanager learns the state again."""
    return alertmanager_push.resend()


@shared_task(ignore_result=True, acks_late=True)
def suspect_named_gpus(finding_ids: list[int]) -> None:
    """The GPUs these new findings name become suspect (``health.gpus``), off the commit's path."""
    suspect_named_gpu(finding_ids)


def queue_gpu_suspicion(finding_ids: Sequence[int]) -> None:
    """New findings committed: queue the suspicion of the GPUs they name, one task for the batch
    (no query here: the committing request, an agent's ingest, does not wait for the writes).
    Remediation marks the GPU itself before it acts (``remediation.tasks.consider_finding``), so
    whichever task runs first writes the one history row."""
    suspect_named_gpus.delay(list(finding_ids))


def queue_alertmanager_push(alert_ids: Sequence[int]) -> None:
    """The alerts changed and their transaction committed: queue their push, one task for the
    batch (a no-op with no Alertmanager configured). A broker that is down loses nothing: the
    resend sends it."""
    if not settings.NODEWARDEN_ALERTMANAGER_URLS:
        return
    try:
        push_alerts_to_alertmanager.delay(list(alert_ids))
    except Exception:  # kombu's errors vary by transport; the alerts' own transaction is done
        log.exception("alertmanager: could not queue the push of alerts %s", list(alert_ids))
