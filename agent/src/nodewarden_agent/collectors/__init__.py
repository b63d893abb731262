"""Collectors: each reads one source and contributes fields to a report.

A collector's ``collect()`` returns a :class:`Contribution`. If it raises, the report
carries ``collector_errors[collector.name]`` with the error text instead of the fields,
so the portal sees "not measured" rather than zeros. ``notes`` are partial problems
(one GPU lost, one field unreadable) that do not void the rest of the contribution.
A collector that keeps a cursor (the kernel log) moves it in ``commit()``, which the
agent calls only once the report is safely in the on-disk spool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Contribution:
    """Report fields from one collector plus notes for ``collector_errors``."""

    fields: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


class Collector(Protocol):
    name: str

    def collect(self) -> Contribution: ...

    def commit(self) -> None: ...


class CollectorError(Exception):
    """A collector could not read its source at all; the message goes to collector_errors."""
