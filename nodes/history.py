"""A node's merged history: lifecycle events and recorded runs, newest first.

Each stream is read with the same time cursor and a bounded page, then merged,
so a page costs two indexed queries however long the node has lived. A filter by
kind (an event kind, or "run" for recorded runs) and by time range narrows both
streams in the same queries; the page, its "older" pages and the API share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.utils import timezone

from nodewarden.bounds import timestamp_problem

from .choices import EventKind
from .models import Node, NodeEvent, Run

PAGE_SIZE = 25
RUN_KIND = "run"  # the kind filter's name for recorded runs (checks, stages, steps)
KIND_CHOICES = [("", "All kinds"), *EventKind.choices, (RUN_KIND, "Recorded run")]
RANGES: dict[str, timedelta | None] = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
RANGE_CHOICES = [("", "Any time"), ("24h", "Last 24 hours"), ("7d", "Last 7 days"), ("30d", "Last 30 days")]
RANGE_CHOICES.append(("all", "All time"))


class HistoryKindForm(forms.Form):
    """The node page's history filter by kind; its time range is the page's shared one (nodewarden/timerange.py)."""

    kind = forms.ChoiceField(choices=KIND_CHOICES, required=False, label="Kind")


class HistoryFilterForm(forms.Form):
    """The history filter of the node page and of ``/api/nodes/{id}/history/`` (GET parameters)."""

    kind = forms.ChoiceField(choices=KIND_CHOICES, required=False, label="Kind")
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False, label="Time range")
    since = forms.DateTimeField(
        required=False, label="Since", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        required=False, label="Until", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("since", "until"):
            problem = timestamp_problem(data[name]) if data.get(name) else None
            if problem:
                self.add_error(name, problem)
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            self.add_error("until", "Until must not be before since.")
        return data

    def window(self, now: datetime | None = None) -> HistoryFilter:
        """The filter the valid form asks for (a preset range sets ``since`` unless it is given)."""
        data = self.cleaned_data
        since: datetime | None = data.get("since")
        span = RANGES.get(data.get("range") or "")
        if since is None and span is not None:
            since = (now or timezone.now()) - span
        return HistoryFilter(kind=data.get("kind") or "", since=since, until=data.get("until"))


@dataclass(frozen=True)
class HistoryFilter:
    kind: str = ""
    since: datetime | None = None
    until: datetime | None = None


NO_FILTER = HistoryFilter()


@dataclass(frozen=True)
class HistoryRow:
    """One row of the merged history, whatever stream it came from."""

    at: datetime
    stream: str  # "event" or "run"
    item: Any


@dataclass(frozen=True)
class HistoryPage:
    rows: list[HistoryRow]
    next_cursor: str | None


def history_page(
    node: Node, before: datetime | None = None, size: int = PAGE_SIZE, where: HistoryFilter = NO_FILTER
) -> HistoryPage:
    events = filter_events(NodeEvent.objects.filter(node=node), where)
    runs = Run.objects.filter(node=node)
    if where.kind:  # one stream only: the other is not read at all
        runs = runs if where.kind == RUN_KIND else runs.none()
    runs = runs.filter(created__gte=where.since) if where.since else runs
    runs = runs.filter(created__lte=where.until) if where.until else runs
    if before is not None:
        events, runs = events.filter(created__lt=before), runs.filter(created__lt=before)
    rows = [HistoryRow(e.created, "event", e) for e in events.order_by("-created", "-id")[: size + 1]]
    rows += [HistoryRow(r.created, "run", r) for r in runs.order_by("-created", "-id")[: size + 1]]
    rows.sort(key=lambda row: row.at, reverse=True)
    has_more = len(rows) > size
    rows = rows[:size]
    return HistoryPage(rows, rows[-1].at.isoformat() if has_more and rows else None)


def filter_events(events: QuerySet[NodeEvent], where: HistoryFilter) -> QuerySet[NodeEvent]:
    """Node events narrowed by the filter (the "run" kind leaves none: runs are another stream)."""
    if where.kind:
        events = events.none() if where.kind == RUN_KIND else events.filter(kind=where.kind)
    if where.since:
        events = events.filter(created__gte=where.since)
    if where.until:
        events = events.filter(created__lte=where.until)
    return events
