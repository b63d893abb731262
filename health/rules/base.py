"""The rule registry: every rule's key, defaults and function, and what a rule yields.

A rule is a small function registered by key. GPU rules get ``(config, context, gpu,
previous)`` once per GPU reading (``previous`` is that GPU's fields as of the previous
report, or ``{}``); node rules get ``(config, context)``. Both yield ``Condition``s:
``fire`` (the condition holds), ``clear`` (data present and the condition absent beyond
the clear threshold) or ``hold`` (inside the hysteresis band, or no way to tell).

A rule may also have a screen (``@screen(key)``, next to the rule): compiled once per
config, it tells from a report alone whether the rule may fire or write (an event
window) on it. Where it may not, and the rule has no open alert on the node, the rule's
clear and hold conditions would change nothing, so evaluation skips the rule: a healthy
report costs a few comparisons per rule, not ~160 conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..choices import RecommendedAction, Severity

FIRE, CLEAR, HOLD = "fire", "clear", "hold"
# ``confirm_seconds`` (a rule parameter): how long remediation waits before a disruptive step or a
# technician ticket, to see whether the condition clears by itself. Set on conditions that come
# and go without a defect; the defaults cover the fleet simulator's noise with its 5-minute
# hysteresis: a link flap (down ~2 min) and a hot aisle (~40 min).
CONFIRM_LINK, CONFIRM_HEAT = 15 * 60, 60 * 60
GPU, NODE, TASK, EXTERNAL = "gpu", "node", "task", "external"


@dataclass(frozen=True)
class RuleSpec:
    """A rule as the code declares it, with the defaults seeded into ``HealthRule``."""

    key: str
    scope: str
    description: str
    severity: str
    recommended_action: str = RecommendedAction.NONE
    threshold: float | None = None
    clear_threshold: float | None = None
    window_seconds: int | None = None
    count: int | None = None
    clear_after_seconds: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    fn: Callable[..., Iterable[Condition]] | None = None

    def defaults(self) -> dict[str, Any]:
        """The ``HealthRule`` field values of this rule's default row."""
        return {
            "key": self.key,
            "severity": str(self.severity),
            "recommended_action": str(self.recommended_action),
            "threshold": self.threshold,
            "clear_threshold": self.clear_threshold,
            "window_seconds": self.window_seconds,
            "count": self.count,
            "clear_after_seconds": self.clear_after_seconds,
            "params": dict(self.params),
            "description": self.description,
        }


@dataclass(frozen=True)
class RuleConfig:
    """The effective settings of one rule for one node (profile row, else default row, else code)."""

    key: str
    severity: str
    recommended_action: str
    threshold: float | None = None
    clear_threshold: float | None = None
    window_seconds: int | None = None
    count: int | None = None
    clear_after_seconds: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    shadow: bool = False

    def param(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)

    @classmethod
    def from_spec(cls, spec: RuleSpec) -> RuleConfig:
        d = spec.defaults()
        d.pop("description")
        return cls(**d)


@dataclass(frozen=True)
class Condition:
    """What a rule concluded about one subject (a GPU, a port, the node). Read-only: the
    clear and hold conditions are shared (see ``_shared``)."""

    state: str
    gpu_index: int | None = None
    subject: str = ""
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: str | None = None  # None: the rule's configured severity
    recommended_action: str | None = None
    xid: int | None = None
    observed_at: datetime | None = None


def fire(summary: str, *, gpu: int | None = None, subject: str = "", **kwargs: Any) -> Condition:
    return Condition(FIRE, gpu_index=gpu, subject=subject, summary=summary, **kwargs)


# A report of a healthy 8-GPU node yields ~160 clear or hold conditions and no other: they
# carry nothing but their subject, so each distinct one is built once and shared.
_SHARED: dict[tuple[str, int | None, str, str], Condition] = {}
_SHARED_MAX = 50_000  # subjects come from reports (IB port names): bound what they can grow


def _shared(state: str, gpu: int | None, subject: str, summary: str) -> Condition:
    key = (state, gpu, subject, summary)
    condition = _SHARED.get(key)
    if condition is None:
        condition = Condition(state, gpu_index=gpu, subject=subject, summary=summary)
        if len(_SHARED) < _SHARED_MAX:
            _SHARED[key] = condition
    return condition


def clear(*, gpu: int | None = None, subject: str = "", summary: str = "") -> Condition:
    return _shared(CLEAR, gpu, subject, summary)


def hold(*, gpu: int | None = None, subject: str = "") -> Condition:
    return _shared(HOLD, gpu, subject, "")


REGISTRY: dict[str, RuleSpec] = {}
# (report context, [(gpu reading, its previous fields or {})]) -> may the rule fire or write?
Screen = Callable[[Any, list[tuple[Any, dict[str, Any]]]], bool]
# rule key -> compile(config): the config's screen, or None where no screen can vouch for
# that config (a limit below zero fires on an unchanged counter): the rule then always runs.
SCREENS: dict[str, Callable[[RuleConfig], Screen | None]] = {}


def _register(scope: str, key: str, **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY[key] = RuleSpec(key=key, scope=scope, description=(fn.__doc__ or "").strip(), fn=fn, **defaults)
        return fn

    return decorator


def gpu_rule(key: str, **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return _register(GPU, key, **defaults)


def node_rule(key: str, **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return _register(NODE, key, **defaults)


def screen(key: str) -> Callable[[Callable[[RuleConfig], Screen | None]], Callable[[RuleConfig], Screen | None]]:
    """Register the screen compiler of rule ``key``: it must answer True on every report on
    which the rule could yield a fire condition or touch the database (tests/health/test_screens.py
    holds each screen to its rule)."""

    def decorator(compile_screen: Callable[[RuleConfig], Screen | None]) -> Callable[[RuleConfig], Screen | None]:
        SCREENS[key] = compile_screen
        return compile_screen

    return decorator


def rises(current: int | None, previous: int | None) -> bool:
    """Whether ``counter_delta`` would be above zero."""
    return current is not None and previous is not None and current > previous


def non_negative(value: Any) -> bool:
    """A limit a screen can vouch for: an unchanged counter (delta 0) stays within it."""
    return isinstance(value, int | float) and value >= 0


def declare(key: str, scope: str, description: str, **defaults: Any) -> None:
    """A rule that is not run per report (the heartbeat task, Alertmanager)."""
    REGISTRY[key] = RuleSpec(key=key, scope=scope, description=description, **defaults)


def counter_delta(current: int | None, previous: int | None) -> int | None:
    """Increase of a cumulative counter; None when unknown. A counter lower than before was
    reset (driver reload, port reset), which says nothing about errors: unknown, not negative."""
    if current is None or previous is None or current < previous:
        return None
    return current - previous


def elapsed_seconds(now: datetime, previous: datetime | None) -> float | None:
    if previous is None:
        return None
    seconds = (now - previous).total_seconds()
    return seconds if seconds > 0 else None


__all__ = [
    "REGISTRY",
    "SCREENS",
    "Condition",
    "RecommendedAction",
    "RuleConfig",
    "RuleSpec",
    "Screen",
    "Severity",
    "clear",
    "counter_delta",
    "declare",
    "elapsed_seconds",
    "fire",
    "gpu_rule",
    "hold",
    "node_rule",
    "non_negative",
    "rises",
    "screen",
]
