"""Event windows for windowed rules ("N events within T"): written only when an event happens."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils.dateparse import parse_datetime

MAX_EVENTS = 100  # bound the JSON list: no rule needs more than this many to decide


def record_events(node_id: int, rule: str, subject: str, times: list[datetime], window_seconds: int) -> int:
    """Add event times to the window and return how many fall within ``window_seconds`` of the newest."""
    from ..models import RuleWindow

    with transaction.atomic():
        window, _ = RuleWindow.objects.select_for_update().get_or_create(node_id=node_id, rule=rule, subject=subject)
        events = sorted([t for t in (parse_datetime(s) for s in window.events) if t is not None] + times)
        newest = events[-1]
        kept = [t for t in events if newest - t < timedelta(seconds=window_seconds)][-MAX_EVENTS:]
        window.events = [t.isoformat() for t in kept]
        window.updated = newest
        window.save(update_fields=["events", "updated"])
    return len(kept)
