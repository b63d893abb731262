"""The release gate: which firing alerts keep a node from going back to customers.

A node returns to production only when nothing serious still fires on it *now*. An alert at or
above ``NODEWARDEN_RELEASE_BLOCKING_SEVERITY`` (default: degraded) blocks the release when
- its condition was seen (again) since the action being verified (``last_seen >= since``), or
- it is a condition the agent's reports evaluate (a health rule run per report) and it has not
  been seen to clear since: no clean report has started its hysteresis clock. A GPU that is still
  missing after a reboot keeps "7 GPUs visible, expected 8" firing and refreshed; a condition no
  report has looked at since the action has not been seen to clear either.
Events (XIDs, failed checks, failed Day 1 stages) are not conditions: they block only when one
was seen since the action; an XID from before the reboot does not.
The fleet auditor reads the same rule for the nodes already in production.

An event the gate let through is answered: the node passed re-validation since it was last seen.
Its alert resolves when the node is released (``resolve_answered_events``, a follow-up of
``release_to_production``), so a node back with its customers shows no firing XID of before the
fix; waiting out the XID quiet period (hours) left a "catastrophic, power cycle" alert firing
on a healthy production node.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from nodes.models import Node, NodeEvent

from .choices import SEVERITY_RANK, AlertState, Severity
from .models import Alert
from .rules import REGISTRY
from .rules.base import EXTERNAL, TASK
from .services import HEALTH, is_event_rule, resolve_alert_locked
from .tasks import QUIET_RULES  # events whose alerts resolve by going quiet

# Validation's failed-stage findings (validation.services.FINDING_RULE; health never imports it): events.
DAY1_STAGE_RULE = "day1_stage"
ANSWERED_LIMIT = 200  # event alerts resolved per release at most (a node has a handful)


def threshold_rank() -> int:
    return SEVERITY_RANK[Severity(settings.NODEWARDEN_RELEASE_BLOCKING_SEVERITY)]


def is_report_condition(rule: str) -> bool:
    """A condition a health rule evaluates on every agent report (so a clean report clears it)."""
    spec = REGISTRY.get(rule)
    return (
        spec is not None
        and spec.fn is not None
        and spec.scope not in (TASK, EXTERNAL)
        and not is_event_rule(rule)
        and rule not in QUIET_RULES
    )


def blocks(alert: Any, since: datetime, rank: int | None = None) -> bool:
    """Does this firing alert keep its node out of production (see the module docstring)? ``rank``:
    the lowest severity rank that counts (default: the release gate's setting)."""
    if alert.state != AlertState.FIRING or alert.severity_rank < (threshold_rank() if rank is None else rank):
        return False
    if alert.last_seen >= since:
        return True
    return is_report_condition(alert.rule) and alert.clearing_since is None


def blocking_alerts(node_id: int, since: datetime, limit: int = 20) -> list[Alert]:
    """The node's firing alerts that block its release, worst first (bounded)."""
    candidates = Alert.objects.filter(
        node_id=node_id, state=AlertState.FIRING, severity_rank__gte=threshold_rank()
    ).order_by("-severity_rank", "-last_seen")[:200]
    return [a for a in candidates if blocks(a, since)][:limit]


def describe(alerts: list[Alert]) -> str:
    shown = "; ".join(f"{a.summary} ({a.get_severity_display().lower()}, {a.rule})" for a in alerts[:3])
    return shown + (f"; and {len(alerts) - 3} more" if len(alerts) > 3 else "")


def still_firing(finding: Any, since: datetime) -> str:
    """The finding's own alert, if it still blocks: its summary; else ''."""
    alert = getattr(finding, "alert", None)
    if alert is None:
        return ""
    alert.refresh_from_db(fields=["state", "last_seen", "clearing_since", "severity_rank"])
    return alert.summary if blocks(alert, since) else ""


def is_event(rule: str) -> bool:
    """An event, not a condition: nothing evaluates it again to see it clear, so only a passed
    re-validation (or the XID quiet period) answers it."""
    return is_event_rule(rule) or rule in QUIET_RULES or rule == DAY1_STAGE_RULE


def resolve_answered_events(node_id: int, since: datetime) -> int:
    """The node was released after a re-validation pass that began at ``since``: its firing event
    alerts last seen before that are answered by the pass, and resolve (each noted on the node's
    history). An event seen during the pass stays firing (the gate held such a node back; an
    operator who released it anyway leaves it to the auditor). Conditions are left to their rules."""
    resolved = 0
    with transaction.atomic():
        alerts = (
            Alert.objects.select_for_update()
            .filter(node_id=node_id, state=AlertState.FIRING, last_seen__lt=since)
            .order_by("id")[:ANSWERED_LIMIT]
        )
        for alert in alerts:
            if is_event(alert.rule):
                resolve_alert_locked(alert, reason="answered: the node passed re-validation since", actor=HEALTH)
                resolved += 1
    return resolved


def released(node: Node, event: NodeEvent) -> str:
    """Follow-up of ``release_to_production``: resolve the event alerts the re-validation pass answered.
    The pass began at the node's last ``start_validation``/``revalidate``/``end_maintenance`` before the release (as the
    gate's ``validation.services.current_pass``); with none on record, nothing was answered."""
    pass_began = (
        NodeEvent.objects.filter(
            node_id=node.pk,
            transition__in=("start_validation", "revalidate", "end_maintenance"),
            created__lte=event.created,
        )
        .order_by("-created", "-id")
        .values_list("created", flat=True)
        .first()
    )
    resolved = resolve_answered_events(node.pk, pass_began) if pass_began is not None else 0
    return f"{resolved} event alert(s) answered by re-validation resolved." if resolved else ""
