"""Builds one AgentReport as a plain dict (the wire format of telemetry/schema.py).

The agent does not import the portal's schema (it must install without Django); a
test in tests/agent/ decodes a full agent-built report with the portal's decoder so
the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import __version__
from .collectors import Collector, CollectorError, Contribution
from .collectors.kmsg import read_boot_id
from .util import atomic_write_json, clip, read_json, utc_iso

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
ERROR_TEXT_MAX = 2000


class SeqCounter:
    """The per-agent report counter, persisted so it keeps rising across restarts."""

    def __init__(self, path: Path, floor: int = 0):
        self.path = Path(path)
        stored = (read_json(self.path, {}) or {}).get("seq", 0)
        # The spool's newest file is a floor: a lost counter file must not reuse numbers.
        self.value = max(int(stored), floor)

    def next(self) -> int:
        self.value += 1
        atomic_write_json(self.path, {"seq": self.value})
        return self.value


def run_collector(collector: Collector) -> Contribution:
    """A collector's contribution, or a failure recorded under its name."""
    try:
        return collector.collect()
    except Exception as exc:
        log.warning("collector %s failed: %s", collector.name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        text = str(exc) if isinstance(exc, CollectorError) else f"{type(exc).__name__}: {exc}"
        return Contribution(notes={collector.name: text})


def build_report(
    hostname: str,
    seq: int,
    collectors: Iterable[Collector],
    extra_errors: dict[str, str] | None = None,
    boot_id: Callable[[], str] = read_boot_id,
) -> dict[str, Any]:
    """Run every collector and assemble the report dict.

    ``boot_id`` (the kernel's, empty where unknown) goes with the report: with each event's
    ``kmsg_seq`` it names one kernel record, so the portal counts an event that a restarted
    agent sends again (its cursor was not saved before the crash) only once.
    """
    report: dict[str, Any] = {
        "report_id": uuid.uuid4().hex,
        "hostname": hostname,
        "collected_at": utc_iso(),
        "schema": SCHEMA_VERSION,
        "seq": seq,
        "agent_version": __version__,
    }
    boot = clip(boot_id(), 64)
    if boot:
        report["boot_id"] = boot
    errors: dict[str, str] = dict(extra_errors or {})
    for collector in collectors:
        contribution = run_collector(collector)
        report.update({k: v for k, v in contribution.fields.items() if v is not None})
        errors.update(contribution.notes)
    if errors:
        report["collector_errors"] = {key[:200]: clip(text, ERROR_TEXT_MAX) for key, text in errors.items()}
    return report
