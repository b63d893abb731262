"""Celery tasks of Day 0: small, idempotent, safe to run twice."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from health.choices import Severity
from health.services import raise_finding
from nodes import services as node_services
from nodes.choices import NodeState
from nodes.models import Node
from nodes.services import Actor

ACTOR = Actor.system("provisioning")
BATCH = 200


def day0_timeout() -> timedelta:
    return timedelta(seconds=settings.NODEWARDEN_DAY0_TIMEOUT)


def fail_stuck_initializing(now: datetime | None = None) -> int:
    """Nodes Initializing for longer than NODEWARDEN_DAY0_TIMEOUT never joined: to triage, with
    what is known (did the node fetch its user-data?), and a finding. Returns how many."""
    now = now or timezone.now()
    limit = day0_timeout()
    stuck = (
        Node.objects.filter(state=NodeState.INITIALIZING, state_changed_at__lt=now - limit)
        .select_related("boot_config")
        .order_by("state_changed_at")[:BATCH]
    )
    failed = 0
    for node in stuck:
        boot = getattr(node, "boot_config", None)
        fetched = boot.user_data_fetched_at if boot is not None else None
        seen = (
            f"its user-data was fetched at {fetched:%Y-%m-%d %H:%M} UTC but the agent never joined"
            if fetched
            else "it never fetched its user-data (did it PXE-boot?)"
        )
        reason = f"Day 0 timed out: not onboard {limit} after initialization began; {seen}"
        try:
            node_services.fail_validation(
                node.pk,
                actor=ACTOR,
                reason=reason,
                details={"stage": "day0", "user_data_fetched_at": str(fetched or "")},
            )
        except (TransitionNotAllowed, ConcurrentTransition):
            continue  # it joined (or was moved) meanwhile
        raise_finding(
            node.pk,
            rule="day0_timeout",
            severity=Severity.DEGRADED,
            summary=reason,
            subject="day0",
            source="provisioning",
            actor=ACTOR,
            every_event=True,
        )
        failed += 1
    return failed


@shared_task(ignore_result=True)
def fail_stuck_day0() -> int:
    """Beat: nodes that never joined go to triage."""
    return fail_stuck_initializing()
