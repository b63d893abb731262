"""The alert list's bulk actions, declared once each (``nodewarden.bulk.register``): acknowledge,
silence, open a repair ticket. Each calls the one-alert verb of ``health.alerts`` once per alert,
in its own transaction with its own note on the node's history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.http import QueryDict
from django.utils import timezone

from nodes.models import OPERATE
from nodes.services import Actor
from nodewarden.bulk import BulkAction, BulkRefused, Outcome, each_item, register
from nodewarden.errors import TransitionForbidden
from repairs.services import RepairConflict

from . import alerts
from .models import Alert

ALERT_LIST = "alerts"
REFUSALS: tuple[type[BaseException], ...] = (alerts.AlertNotFiring, TransitionForbidden, RepairConflict)


def _labels(ids: list[int]) -> dict[int, str]:
    rows = Alert.objects.filter(pk__in=ids).select_related("node").only("id", "gpu_index", "rule", "node__hostname")
    return {a.pk: alerts.label(a) for a in rows}


def _run(ids: list[int], call: Callable[[int], object]) -> list[Outcome]:
    return each_item(ids, _labels(ids), call, REFUSALS, missing=(Alert.DoesNotExist,))


def acknowledge(ids: list[int], user: Any, reason: str, post: QueryDict) -> list[Outcome]:
    """Someone is on it, one note for all (``alerts.acknowledge`` per alert)."""
    actor = Actor(user=user)
    return _run(ids, lambda pk: alerts.acknowledge(pk, actor=actor, note=reason))


def silence(ids: list[int], user: Any, reason: str, post: QueryDict) -> list[Outcome]:
    """Silence every alert until one end (``alerts.silence`` per alert); a length outside one
    minute to 30 days refuses the whole selection."""
    raw = post.get("minutes") or ""
    minutes = int(raw) if raw.isdigit() else 0
    if not 0 < minutes <= alerts.MAX_SILENCE.total_seconds() // 60:
        raise BulkRefused("A silence lasts from one minute to 30 days.")
    until = timezone.now() + timedelta(minutes=minutes)  # one end for the whole selection
    actor = Actor(user=user)
    return _run(ids, lambda pk: alerts.silence(pk, actor=actor, reason=reason, until=until))


def ticket(ids: list[int], user: Any, reason: str, post: QueryDict) -> list[Outcome]:
    """A repair ticket per node and component (``alerts.ticket`` per alert: alerts of one GPU
    share its ticket)."""
    actor = Actor(user=user)
    return _run(ids, lambda pk: alerts.ticket(pk, actor=actor, reason=reason))


def register_alert_actions() -> None:
    """Declare the alert list's actions (``HealthConfig.ready``)."""
    register(ALERT_LIST, BulkAction("acknowledge", "Acknowledge", OPERATE, acknowledge, "acknowledged"))
    register(ALERT_LIST, BulkAction("silence", "Silence", OPERATE, silence, "silenced", fields=("minutes",)))
    register(ALERT_LIST, BulkAction("ticket", "Open a repair ticket", OPERATE, ticket, "put on a repair ticket"))
