"""A tenant's availability for a period: per node, time in production, incidents (outages) and
downtime; and the incidents themselves with the finding behind each and how long until the node
was back. Definitions in ``reports.outages``; scoping is the caller's (``nodes.scoping``).

Reads a page at a time: a fixed number of queries per page of nodes or incidents.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from nodes.models import Node, NodeEvent
from remediation.models import Remediation

from . import outages
from .choices import SERVING, STATE_CHANGE_KINDS, Attribution
from .filters import Period


@dataclass
class NodeAvailability:
    """One node's period: seconds serving and down, its incidents, and the share it served."""

    node: Node
    serving_s: float = 0.0
    downtime_s: float = 0.0
    provider_s: float = 0.0
    customer_s: float = 0.0
    node_outages: list[outages.Outage] = field(default_factory=list)

    @property
    def incidents(self) -> int:
        return len(self.node_outages)

    @property
    def availability_pct(self) -> float | None:
        """Time in production over time in production or down; None for a node never in production."""
        total = self.serving_s + self.downtime_s
        return round(100 * self.serving_s / total, 2) if total else None


@dataclass
class Incident:
    """One outage of one node in the period, with the finding behind it when there was one."""

    outage: outages.Outage
    hostname: str
    node_id: int
    reason: str = ""
    finding: dict[str, Any] | None = None

    @property
    def started(self) -> datetime:
        return self.outage.started

    @property
    def ended(self) -> datetime | None:
        return self.outage.ended

    @property
    def until_back(self) -> timedelta | None:
        """From leaving production to back in it (None: not back yet)."""
        return self.outage.ended - self.outage.started if self.outage.ended else None

    @property
    def attribution(self) -> str:
        return self.outage.attribution


def with_state_at(nodes: QuerySet[Node], period: Period) -> QuerySet[Node]:
    """Annotate each node with the state it was in at the period's end when a change came after it."""
    later = (
        NodeEvent.objects.filter(node=OuterRef("pk"), kind__in=STATE_CHANGE_KINDS, created__gte=period.until)
        .order_by("created", "id")
        .values("source_state")[:1]
    )
    return nodes.annotate(state_after_period=Subquery(later))


def node_availability(nodes: Sequence[Node], period: Period) -> list[NodeAvailability]:
    """Per node of a page (annotated by ``with_state_at``): two queries whatever the page's size."""
    ids = [n.pk for n in nodes]
    serving = outages.serving_seconds(ids, period.since, period.until)
    rows = {n.pk: NodeAvailability(n, serving_s=_serving(n, serving.get(n.pk), period)) for n in nodes}
    for outage in outages.outages(outages.Scope(node_ids=ids), period.since, period.until):
        row = rows[outage.node_id]
        row.node_outages.append(outage)
        row.downtime_s += outage.seconds
        if outage.attribution == Attribution.PROVIDER:
            row.provider_s += outage.seconds
        else:
            row.customer_s += outage.seconds
    return [rows[pk] for pk in ids]


def _serving(node: Node, changes: outages.ServingTime | None, period: Period) -> float:
    """Serving seconds from the changes read, plus the stay before the first of them (or the whole
    period when none was read: the node was in one state throughout)."""
    start = max(node.created, period.since)
    if changes is None or changes.first_change_at is None:
        state = getattr(node, "state_after_period", None) or node.state
        return max((period.until - start).total_seconds(), 0.0) if state in SERVING else 0.0
    before = 0.0
    if changes.state_before in SERVING:
        before = max((changes.first_change_at - start).total_seconds(), 0.0)
    return changes.seconds + before


class IncidentList:
    """The scope's incidents, newest first, sliced lazily for ``Paginator``. With ``page`` (the
    number the page will ask for), counting reads that page and the totals in one statement."""

    def __init__(self, scope: outages.Scope, period: Period, *, page: int | None = None, page_size: int = 50) -> None:
        self.scope, self.period, self.page_size = scope, period, page_size
        self.first: outages.OutagePage | None = None
        self.offset = (max(page, 1) - 1) * page_size if page is not None else None
        self.total: int | None = None

    def count(self) -> int:
        if self.total is None:
            if self.offset is None:
                self.total = outages.count_outages(self.scope, self.period.since, self.period.until)
                return self.total
            self.first = self._page(self.offset)
            if self.first is None and self.offset:  # past the end: the totals come with the first page
                self.first, self.offset = self._page(0), 0
            self.total = self.first.count if self.first else 0
        return self.total

    def _page(self, offset: int) -> outages.OutagePage | None:
        return outages.outage_page(
            self.scope, self.period.since, self.period.until, limit=self.page_size, offset=offset
        )

    def totals(self) -> dict[str, tuple[int, float]]:
        """Outages and seconds per attribution (empty unless a page was read)."""
        return self.first.totals if self.first else {}

    def __getitem__(self, index: slice) -> list[Incident]:
        start, stop = index.start or 0, index.stop
        if self.first is not None and start == self.offset:
            return incidents(self.first.rows)
        limit = None if stop is None else stop - start
        return incidents(outages.outages(self.scope, self.period.since, self.period.until, limit=limit, offset=start))

    def __iter__(self) -> Iterator[Incident]:
        """Every incident, a page of ``CHUNK`` at a time (the CSV file)."""
        offset = 0
        while True:
            chunk = self[offset : offset + CHUNK]
            yield from chunk
            if len(chunk) < CHUNK:
                return
            offset += CHUNK


CHUNK = 500


def incidents(rows: Sequence[outages.Outage]) -> list[Incident]:
    """Outages with their node's hostname, the reason of the change that started them and the finding
    behind them (the remediation the change names): two queries whatever the number of rows."""
    started = {
        e["pk"]: e
        for e in NodeEvent.objects.filter(pk__in=[o.initiating_event_id for o in rows]).values(
            "pk", "hostname", "reason", "details"
        )
    }
    remediation_of = {
        pk: e["details"].get("remediation")
        for pk, e in started.items()
        if isinstance(e["details"], dict) and isinstance(e["details"].get("remediation"), int)
    }
    findings: dict[int, dict[str, Any]] = {}
    for rem in Remediation.objects.filter(pk__in=set(remediation_of.values()), finding__isnull=False).values(
        "pk", "finding_id", "finding__summary", "finding__rule", "finding__severity", "finding__created"
    ):
        findings[rem["pk"]] = {
            "id": rem["finding_id"],
            "summary": rem["finding__summary"],
            "rule": rem["finding__rule"],
            "severity": rem["finding__severity"],
            "created": rem["finding__created"],
            "remediation": rem["pk"],
        }
    result = []
    for outage in rows:
        event: Mapping[str, Any] = started.get(outage.initiating_event_id, {})
        rem_id = remediation_of.get(outage.initiating_event_id)
        result.append(
            Incident(
                outage,
                hostname=event.get("hostname", ""),
                node_id=outage.node_id,
                reason=event.get("reason", ""),
                finding=findings.get(rem_id) if rem_id else None,
            )
        )
    return result
