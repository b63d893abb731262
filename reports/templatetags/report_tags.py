"""Filters of the report pages: durations in words, seconds as hours."""

from __future__ import annotations

from datetime import timedelta

from django import template

from remediation.summary import duration_text

register = template.Library()


@register.filter
def duration(value: float | timedelta | None) -> str:
    """Seconds (or a timedelta) as "12 min", "3.5 h", "2.1 d"; "—" for none."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return duration_text(value)


@register.filter
def hours(seconds: float | None) -> str:
    """Seconds as hours with one decimal ("—" for none)."""
    return "—" if seconds is None else f"{seconds / 3600:,.1f}"
