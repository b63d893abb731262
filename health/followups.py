"""What a new finding, and a change of an alert, cause: declared in one place.

``raise_finding`` records a finding in its caller's transaction; once that commits, every
handler registered here gets the finding's id (remediation registers "consider it for a
remediation" in its ``AppConfig.ready``). Health sits below remediation and never imports
it; no signal handler performs a step of the domain.

Every verb that changes what an alert looks like from outside (opened, escalated,
acknowledged, silenced, unsilenced, resolved) queues the alert's id the same way
(``queue_alert_followups``): health registers "push it to Alertmanager" (``health.tasks``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from django.db import transaction

Handler = Callable[[int], None]
ON_NEW_FINDING: list[Handler] = []


def on_new_finding(fn: Handler) -> Handler:
    """Register ``fn(finding_id)``, run after the commit of every new finding that opens or
    escalates an alert (shadow findings cause nothing)."""
    ON_NEW_FINDING.append(fn)
    return fn


def queue_finding_followups(finding_id: int) -> None:
    """Queue the registered handlers to run once the current transaction commits."""
    for handler in ON_NEW_FINDING:
        transaction.on_commit(partial(handler, finding_id))


ON_ALERT_CHANGE: list[Handler] = []


def on_alert_changed(fn: Handler) -> Handler:
    """Register ``fn(alert_id)``, run after the commit of every verb that changed an alert's
    state, severity, acknowledgement or silence."""
    ON_ALERT_CHANGE.append(fn)
    return fn


def queue_alert_followups(alert_id: int) -> None:
    """Queue the alert's registered handlers to run once the current transaction commits."""
    for handler in ON_ALERT_CHANGE:
        transaction.on_commit(partial(handler, alert_id))
