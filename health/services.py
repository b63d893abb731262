"""Health services: the only road from a signal to a finding and an alert.

Other apps call only these:

raise_finding(node_id, *, rule, severity, summary, evidence=None, gpu_index=None,
              recommended_action=RecommendedAction.NONE, source="", subject="",
              observed_at=None, shadow=False, actor=None) -> Finding | None
    Record a finding for ``rule`` on the node (and GPU), open or refresh the deduplicated
    alert keyed by (node, rule, gpu_index, subject), and write a lifecycle event
    (NodeEvent kind=finding) in the same transaction; once it commits, the finding's
    follow-ups run (``health.followups``: remediation considers it). Shadow findings are recorded and
    marked, but open no alert and write no event. Returns None when an already-open
    alert was only refreshed (same condition seen again, no escalation).

clear_condition(node_id, *, rule, gpu_index=None, subject="", reason="") -> Alert | None
    The condition behind an open alert is gone: resolve it.

Operator verbs (acknowledge, silence, unsilence, resolve) live in ``health.alerts``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from nodes.choices import EventKind
from nodes.models import Node
from nodes.services import Actor, record_event

from .choices import SEVERITY_RANK, AlertState, RecommendedAction, Severity
from .followups import queue_alert_followups, queue_finding_followups
from .models import Alert, Finding

HEALTH = Actor.system("health")

# Rules where every event is its own finding (the alert counts them); all other rules are
# conditions: one finding when the condition starts (or escalates), then only a refresh.
EVENT_RULES = frozenset({"xid", "active_check"})
EVENT_RULE_PREFIXES = ("check",)  # checks.* findings: every failed run is its own finding


def is_event_rule(rule: str) -> bool:
    return rule in EVENT_RULES or rule.startswith(EVENT_RULE_PREFIXES)


def dedupe_key(rule: str, gpu_index: int | None, subject: str) -> str:
    """The alert's identity on a node. Spelled out ('-' for no GPU) because NULLs never collide in SQL."""
    return f"{rule}|{'-' if gpu_index is None else gpu_index}|{subject}"


def raise_finding(
    node_id: int,
    *,
    rule: str,
    severity: str,
    summary: str,
    evidence: dict[str, Any] | None = None,
    gpu_index: int | None = None,
    recommended_action: str = RecommendedAction.NONE,
    source: str = "",
    subject: str = "",
    observed_at: datetime | None = None,
    shadow: bool = False,
    actor: Actor | None = None,
    xid: int | None = None,
    every_event: bool | None = None,
) -> Finding | None:
    """Record that ``rule`` fires on a node (see the module docstring).

    ``xid`` tags the finding with an XID number; ``every_event`` forces event semantics
    (a finding per call) for rules not listed in ``EVENT_RULES``. Raises
    ``Node.DoesNotExist`` for an unknown node and ``ValueError`` for a bad severity.
    """
    severity = Severity(severity)
    recommended_action = RecommendedAction(recommended_action or RecommendedAction.NONE)
    summary = (summary or "").strip() or f"{rule} fired"
    observed_at = observed_at or timezone.now()
    actor = actor or HEALTH
    fields = {
        "rule": rule,
        "severity": severity,
        "recommended_action": recommended_action,
        "summary": summary,
        "evidence": evidence or {},
        "gpu_index": gpu_index,
        "source": source,
        "subject": subject,
        "observed_at": observed_at,
        "xid": xid,
        "actor_name": actor.name,
    }
    events = is_event_rule(rule) if every_event is None else every_event
    with transaction.atomic():
        node = Node.objects.only("id", "hostname").get(pk=node_id)
        if shadow:
            return Finding.objects.create(node=node, hostname=node.hostname, shadow=True, **fields)
        alert, is_new = _open_or_refresh_alert(node, fields)
        escalated = not is_new and SEVERITY_RANK[severity] > alert.severity_rank
        if not (is_new or escalated or events):
            return None
        if escalated:
            alert.severity, alert.summary, alert.recommended_action = severity, summary, recommended_action
        finding = Finding.objects.create(node=node, hostname=node.hostname, alert=alert, **fields)
        finding.event = _record_finding_event(node, finding, alert, actor)
        finding.save(update_fields=["event"])
        alert.last_finding = finding
        alert.save(update_fields=["last_finding", "severity", "summary", "recommended_action"])
        queue_finding_followups(finding.pk)  # after commit: remediation considers it (health.followups)
        if is_new or escalated:
            queue_alert_followups(alert.pk)  # after commit: Alertmanager hears of it
    return finding


def _open_or_refresh_alert(node: Node, fields: dict[str, Any]) -> tuple[Alert, bool]:
    """The firing alert for this condition, refreshed, or a new one. Locked for the transaction."""
    key = dedupe_key(fields["rule"], fields["gpu_index"], fields["subject"])
    for _attempt in range(2):
        alert = Alert.objects.select_for_update().filter(node=node, dedupe_key=key, state=AlertState.FIRING).first()
        if alert is not None:
            alert.last_seen = max(alert.last_seen, fields["observed_at"])
            alert.occurrences += 1
            alert.clearing_since = None  # seen again: the hysteresis clock starts over
            alert.save(update_fields=["last_seen", "occurrences", "clearing_since"])
            return alert, False
        try:
            # A savepoint: losing the race to a concurrent ingest must not break the outer transaction.
            with transaction.atomic():
                return Alert.objects.create(
                    node=node,
                    dedupe_key=key,
                    rule=fields["rule"],
                    gpu_index=fields["gpu_index"],
                    subject=fields["subject"],
                    severity=fields["severity"],
                    summary=fields["summary"],
                    recommended_action=fields["recommended_action"],
                    first_seen=fields["observed_at"],
                    last_seen=fields["observed_at"],
                ), True
        except IntegrityError:
            continue  # the other writer's alert is committed now: refresh it instead
    raise RuntimeError(f"Could not open or refresh alert {key} on node {node.pk}")


def _record_finding_event(node: Node, finding: Finding, alert: Alert, actor: Actor) -> Any:
    gpu = f"GPU {finding.gpu_index}: " if finding.gpu_index is not None else ""
    action = RecommendedAction(finding.recommended_action)
    reason = f"{Severity(finding.severity).label}: {gpu}{finding.summary}"
    if action != RecommendedAction.NONE:
        reason += f" (recommended: {action.label})"
    details = {
        "severity": finding.severity,
        "rule": finding.rule,
        "gpu_index": finding.gpu_index,
        "xid": finding.xid,
        "recommended_action": finding.recommended_action,
        "finding_id": finding.pk,
        "alert_id": alert.pk,
        "subject": finding.subject,
        "source": finding.source,
    }
    return record_event(node.pk, EventKind.FINDING, actor=actor, reason=reason, details=details)


def clear_condition(
    node_id: int, *, rule: str, gpu_index: int | None = None, subject: str = "", reason: str = ""
) -> Alert | None:
    """The condition behind an open alert is gone: resolve it now. None if no alert was open."""
    key = dedupe_key(rule, gpu_index, subject)
    with transaction.atomic():
        alert = (
            Alert.objects.select_for_update().filter(node_id=node_id, dedupe_key=key, state=AlertState.FIRING).first()
        )
        if alert is None:
            return None
        return resolve_alert_locked(alert, reason=reason or "condition cleared", actor=HEALTH)


def resolve_alert_locked(alert: Alert, *, reason: str, actor: Actor, at: datetime | None = None) -> Alert:
    """Resolve an alert the caller holds (locked, firing) and note it on the node's history."""
    alert.state = AlertState.RESOLVED
    alert.resolved_at = at or timezone.now()
    alert.resolved_reason = reason[:300]
    alert.resolved_by = actor.name
    alert.clearing_since = None
    alert.save(update_fields=["state", "resolved_at", "resolved_reason", "resolved_by", "clearing_since"])
    gpu = f"GPU {alert.gpu_index}: " if alert.gpu_index is not None else ""
    record_event(
        alert.node_id,
        EventKind.NOTE,
        actor=actor,
        reason=f"Alert resolved: {gpu}{alert.summary} ({reason})",
        details={"alert_id": alert.pk, "rule": alert.rule, "gpu_index": alert.gpu_index, "resolved": True},
    )
    queue_alert_followups(alert.pk)
    return alert


def note_clear(alert: Alert, *, now: datetime, clear_after_seconds: int, reason: str) -> Alert | None:
    """Evaluation saw the condition clear: start the hysteresis clock, or resolve once it has run.

    ``alert`` comes from the batch's preloaded open alerts; the write re-checks state so a
    concurrent resolve is not undone. Returns the alert if it was resolved now.
    """
    if alert.clearing_since is None and clear_after_seconds > 0:
        alert.clearing_since = now
        Alert.objects.filter(pk=alert.pk, state=AlertState.FIRING).update(clearing_since=now)
        return None
    since = alert.clearing_since or now
    if (now - since).total_seconds() < clear_after_seconds:
        return None
    with transaction.atomic():
        locked = Alert.objects.select_for_update().filter(pk=alert.pk, state=AlertState.FIRING).first()
        if locked is None:
            return None
        return resolve_alert_locked(locked, reason=reason, actor=HEALTH, at=now)


def note_not_clear(alert: Alert) -> None:
    """Inside the hysteresis band (not firing, not clear): the clearing clock stops."""
    if alert.clearing_since is not None:
        alert.clearing_since = None
        Alert.objects.filter(pk=alert.pk).update(clearing_since=None)
