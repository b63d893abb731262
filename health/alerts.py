"""Operator verbs on alerts: acknowledge, silence, unsilence, resolve, open a repair ticket.

One function per verb: permission, lock, change, and a history row on the node (an
operator note), in one transaction. Views, the API and the admin all call these.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodes.choices import EventKind
from nodes.models import OPERATE
from nodes.services import Actor, clean_reason, record_event
from nodewarden.errors import TransitionForbidden
from repairs import services as repairs
from repairs.choices import OPEN_TICKET_STATES
from repairs.models import RepairTicket

from .choices import AlertState
from .followups import queue_alert_followups
from .models import Alert
from .services import resolve_alert_locked

MAX_SILENCE = timedelta(days=30)


class AlertNotFiring(ValueError):
    """The verb needs a firing alert and this one is resolved."""


def _reason(text: str | None) -> str:
    return clean_reason(text)[:300]


def _locked(alert_id: int, actor: Actor) -> Alert:
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise TransitionForbidden(f"{actor.name} may not act on alerts.")
    alert = Alert.objects.select_for_update().get(pk=alert_id)
    if alert.state != AlertState.FIRING:
        raise AlertNotFiring(f"Alert {alert_id} is already resolved.")
    return alert


def _note(alert: Alert, actor: Actor, verb: str, reason: str, **details: Any) -> None:
    gpu = f"GPU {alert.gpu_index}: " if alert.gpu_index is not None else ""
    record_event(
        alert.node_id,
        EventKind.NOTE,
        actor=actor,
        reason=f"Alert {verb}: {gpu}{alert.summary} ({reason})",
        details={"alert_id": alert.pk, "rule": alert.rule, "alert_verb": verb, **details},
    )
    queue_alert_followups(alert.pk)  # every verb here changes what Alertmanager should be told


def acknowledge(alert_id: int, *, actor: Actor, note: str) -> Alert:
    """Someone is on it: the alert stays firing, marked with who and why."""
    note = _reason(note)
    with transaction.atomic():
        alert = _locked(alert_id, actor)
        alert.acknowledged_by, alert.acknowledged_at, alert.acknowledged_note = actor.user, timezone.now(), note
        alert.save(update_fields=["acknowledged_by", "acknowledged_at", "acknowledged_note"])
        _note(alert, actor, "acknowledged", note)
    return alert


def silence(
    alert_id: int, *, actor: Actor, reason: str, until: datetime | None = None, minutes: int | None = None
) -> Alert:
    """Hide the alert until ``until`` (or for ``minutes``): it still counts occurrences, and
    remediation skips it. At most 30 days; the end must lie in the future."""
    reason = _reason(reason)
    now = timezone.now()
    if until is None and minutes is not None:
        until = now + timedelta(minutes=minutes)
    if until is None or until <= now:
        raise ValueError("A silence needs an end in the future (until or minutes).")
    if until - now > MAX_SILENCE:
        raise ValueError("A silence may last at most 30 days.")
    with transaction.atomic():
        alert = _locked(alert_id, actor)
        alert.silenced_until, alert.silenced_by, alert.silenced_reason = until, actor.user, reason
        alert.save(update_fields=["silenced_until", "silenced_by", "silenced_reason"])
        _note(alert, actor, "silenced", reason, silenced_until=until.isoformat())
    return alert


def unsilence(alert_id: int, *, actor: Actor, reason: str = "silence lifted") -> Alert:
    """End a silence early."""
    reason = _reason(reason)
    with transaction.atomic():
        alert = _locked(alert_id, actor)
        alert.silenced_until = None
        alert.save(update_fields=["silenced_until"])
        _note(alert, actor, "unsilenced", reason)
    return alert


def resolve(alert_id: int, *, actor: Actor, reason: str) -> Alert:
    """An operator closes the alert by hand; the next firing of the condition opens a new one."""
    reason = _reason(reason)
    with transaction.atomic():
        alert = _locked(alert_id, actor)
        return resolve_alert_locked(alert, reason=reason, actor=actor)


def label(alert: Alert) -> str:
    """How a bulk result names the alert: its node, GPU and rule."""
    gpu = f" GPU {alert.gpu_index}" if alert.gpu_index is not None else ""
    return f"{alert.node.hostname}{gpu} {alert.rule}"


def component(alert: Alert) -> str:
    """The part the alert is about, as a repair ticket names it: a GPU, else its subject (an IB
    port, a PSU), else the node as a whole."""
    if alert.gpu_index is not None:
        return f"GPU {alert.gpu_index}"
    return alert.subject or "node"


def ticket(alert_id: int, *, actor: Actor, reason: str) -> RepairTicket:
    """A technician's repair ticket for the alert's node and component: the open ticket of that
    node and component if there is one (three alerts of one GPU are one ticket), else a new one
    (``repairs.services.open_repair_ticket``, which may move a node in triage to repair). The
    alert stays firing; the node's history notes which ticket took it."""
    reason = _reason(reason)
    with transaction.atomic():
        alert = _locked(alert_id, actor)
        part = component(alert)
        found = (
            RepairTicket.objects.filter(node_id=alert.node_id, component=part, state__in=OPEN_TICKET_STATES)
            .order_by("created")
            .first()
        )
        if found is None:
            found = repairs.open_repair_ticket(
                alert.node_id,
                component=part,
                what=f"{alert.summary} ({alert.rule})",
                actor=actor,
                reason=reason,
                finding_id=alert.last_finding_id,
            )
        _note(alert, actor, "ticketed", f"repair ticket #{found.pk}: {reason}", repair_ticket=found.pk)
    return found
