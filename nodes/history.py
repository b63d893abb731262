"""A node's merged history: lifecycle events and recorded runs, newest first.

Each stream is read with the same time cursor and a bounded page, then merged,
so a page costs two indexed queries however long the node has lived.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import Node, NodeEvent, Run

PAGE_SIZE = 25


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


def history_page(node: Node, before: datetime | None = None, size: int = PAGE_SIZE) -> HistoryPage:
    events = NodeEvent.objects.filter(node=node)
    runs = Run.objects.filter(node=node)
    if before is not None:
        events, runs = events.filter(created__lt=before), runs.filter(created__lt=before)
    rows = [HistoryRow(e.created, "event", e) for e in events.order_by("-created", "-id")[: size + 1]]
    rows += [HistoryRow(r.created, "run", r) for r in runs.order_by("-created", "-id")[: size + 1]]
    rows.sort(key=lambda row: row.at, reverse=True)
    has_more = len(rows) > size
    rows = rows[:size]
    return HistoryPage(rows, rows[-1].at.isoformat() if has_more and rows else None)
