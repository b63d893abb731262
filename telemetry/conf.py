"""Telemetry settings: ``settings.TELEMETRY_*`` if the project sets them, else the
environment, else a default. Read at call time so tests can override them."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULTS = {
    # Raw GpuSample rows older than this become GpuSampleHourly.
    "TELEMETRY_RAW_RETENTION_DAYS": 14,
    # NodeReport history (heartbeat evidence, summaries).
    "TELEMETRY_REPORT_RETENTION_DAYS": 90,
    # XID records are evidence for RMA cases: kept a year.
    "TELEMETRY_XID_RETENTION_DAYS": 365,
    # Hourly roll-ups.
    "TELEMETRY_HOURLY_RETENTION_DAYS": 730,
    # Largest accepted ingest body (bytes); larger answers 413.
    "TELEMETRY_MAX_BODY_BYTES": 8 * 1024 * 1024,
    # A report or event dated more than this many seconds after the portal's clock is
    # refused (400): it would otherwise hold the node's latest state until that date.
    "NODEWARDEN_REPORT_MAX_FUTURE_SECONDS": 300,
}


def setting(name: str) -> int:
    """An integer telemetry setting; a malformed environment value fails loudly."""
    value = getattr(settings, name, None)
    if value is not None:
        return int(value)
    raw = os.environ.get(name, "")
    if not raw:
        return DEFAULTS[name]
    try:
        number = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if number <= 0:
        raise ImproperlyConfigured(f"{name} must be positive, got {number}")
    return number
