"""The workload scheduler kinds a cluster may name (``Cluster.scheduler_kind``): registered, not hard-coded.

Each installed app registers the kinds it brings from its ``AppConfig.ready``: the product's
schedulers app registers Slurm and Kubernetes (``schedulers/apps.py``), the sandbox its fleet
simulator's scheduler (``sandbox/simulator/apps.py``). "none" is built in: it is the field's default.

The registry lives here, in the lowest layer, because ``Cluster`` validates its kind against it;
the adapter each entry carries is handed in by the app that registers it, so fleet imports
nothing above itself. ``schedulers.base.adapter_for`` builds adapters from it. The field keeps no
``choices``: migrations would otherwise differ with what is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError

from .choices import SchedulerKind

MAX_LENGTH = 20  # Cluster.scheduler_kind's max_length


@dataclass(frozen=True)
class SchedulerKindEntry:
    """One kind: its stored value, its label, and what builds its adapter for a cluster."""

    value: str
    label: str
    # Builds a schedulers.base.SchedulerAdapter for a cluster (a class or factory); None: no scheduler.
    adapter: Callable[[Any], Any] | None


_KINDS: dict[str, SchedulerKindEntry] = {
    SchedulerKind.NONE: SchedulerKindEntry(SchedulerKind.NONE.value, SchedulerKind.NONE.label, None),
}


def register_scheduler_kind(value: str, label: str, adapter: Callable[[Any], Any]) -> None:
    """Make ``value`` a kind clusters may name. Idempotent; a second, different adapter is an error."""
    if not value or len(value) > MAX_LENGTH:
        raise ImproperlyConfigured(f"Scheduler kind {value!r}: 1 to {MAX_LENGTH} characters.")
    entry = SchedulerKindEntry(value, label, adapter)
    known = _KINDS.get(value)
    if known is not None and known != entry:
        raise ImproperlyConfigured(f"Scheduler kind {value!r} is registered twice ({known.adapter} and {adapter}).")
    _KINDS[value] = entry


def unregister_scheduler_kind(value: str) -> None:
    """Forget a registered kind ("none" stays). For tests that register a kind of their own."""
    if value != SchedulerKind.NONE:
        _KINDS.pop(value, None)


def scheduler_kind(value: str) -> SchedulerKindEntry | None:
    """The registered entry for ``value``; None when no installed app brings that kind."""
    return _KINDS.get(value)


def scheduler_kind_choices() -> list[tuple[str, str]]:
    """(value, label) of every registered kind, "none" last: for forms and filters."""
    entries = sorted(_KINDS.values(), key=lambda e: (e.value == SchedulerKind.NONE, e.label.lower()))
    return [(e.value, e.label) for e in entries]


def scheduler_kind_label(value: str) -> str:
    """The kind's label; an unregistered value (e.g. a sandbox kind in a product-only install) says so."""
    entry = _KINDS.get(value)
    return entry.label if entry is not None else f"{value} (not installed)"


def validate_scheduler_kind(value: str) -> None:
    """Refuse a kind no installed app registered (the model's validator: admin forms, full_clean)."""
    if value not in _KINDS:
        known = ", ".join(v for v, _ in scheduler_kind_choices())
        raise ValidationError(
            "Unknown scheduler kind %(value)s; the installed kinds are: %(known)s.",
            code="unknown_scheduler_kind",
            params={"value": repr(value), "known": known},
        )
