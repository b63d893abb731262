"""The alert counts every page and /metrics shows, from one definition.

"Firing" is every alert in state ``firing``: acknowledged and silenced ones included (they are
still wrong now). The alert list hides silenced ones by default, so each count says how many of
the firing alerts are silenced; ``silenced_q`` is the one rule the list's filter uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from .choices import AlertState, Severity
from .models import Alert


def silenced_q(now: datetime) -> Q:
    """Alerts silenced at ``now`` (a silence that has run out no longer counts)."""
    return Q(silenced_until__gt=now)


@dataclass(frozen=True)
class FiringCounts:
    """Firing alerts per severity (every severity, zeros included), and the silenced ones among them."""

    by_severity: dict[str, int]
    silenced_by_severity: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_severity.values())

    @property
    def silenced(self) -> int:
        return sum(self.silenced_by_severity.values())

    @property
    def shown(self) -> int:
        """What the alert list shows by default: firing and not silenced."""
        return self.total - self.silenced


def firing_counts(alerts: QuerySet[Alert], now: datetime | None = None) -> FiringCounts:
    """The firing alerts of ``alerts`` (already scoped to the reader) per severity, in one query."""
    now = now or timezone.now()
    rows = (
        alerts.filter(state=AlertState.FIRING)
        .values_list("severity")
        .annotate(n=Count("id"), silenced=Count("id", filter=silenced_q(now)))
        .order_by()
    )
    total = {severity: (n, silenced) for severity, n, silenced in rows}
    return FiringCounts(
        {s: total.get(s, (0, 0))[0] for s in Severity.values},
        {s: total.get(s, (0, 0))[1] for s in Severity.values},
    )
