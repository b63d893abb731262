"""Effective rule settings per hardware profile, cached in-process for the ingest hot path.

The cache holds every ``HealthRule`` row and every profile's HCA rate; it is dropped when
a rule is saved (signal in ``apps.py``) and re-read at most every ``TTL_SECONDS`` anyway,
so a change made by another process is picked up quickly. Each profile's plan (its
enabled rules with their configs and compiled screens, ``RuleBook.plan``) is built once
per cache and dies with it: a report pays no config lookup and no compiling.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from fleet.models import HardwareProfile

from .rules import REGISTRY, RuleConfig
from .rules.base import SCREENS, Screen

TTL_SECONDS = 30.0

# (rule spec, its config, its compiled screen or None: always run)
PlanEntry = tuple[Any, RuleConfig, Screen | None]
_Cache = tuple[float, dict[tuple[str, int | None], RuleConfig], dict[int, int], dict[int | None, list[PlanEntry]]]

_lock = threading.Lock()
_cache: _Cache | None = None


def invalidate_cache() -> None:
    global _cache
    with _lock:
        _cache = None


def _row_config(row: Any) -> RuleConfig:
    return RuleConfig(
        key=row.key,
        severity=row.severity,
        recommended_action=row.recommended_action,
        threshold=row.threshold,
        clear_threshold=row.clear_threshold,
        window_seconds=row.window_seconds,
        count=row.count,
        clear_after_seconds=row.clear_after_seconds,
        params=row.params or {},
        enabled=row.enabled,
        shadow=row.shadow,
    )


def _load() -> _Cache:
    from .models import HealthRule

    global _cache
    with _lock:
        if _cache is None or time.monotonic() - _cache[0] > TTL_SECONDS:
            rows = {(r.key, r.hardware_profile_id): _row_config(r) for r in HealthRule.objects.all()}
            rates = dict(HardwareProfile.objects.values_list("id", "hca_rate_gbps"))
            _cache = (time.monotonic(), rows, rates, {})
        return _cache


def _compile_screen(key: str, cfg: RuleConfig) -> Screen | None:
    compile_screen = SCREENS.get(key)
    if compile_screen is None:
        return None
    try:
        return compile_screen(cfg)
    except Exception:  # a config the screen cannot read: the rule runs, and says what is wrong
        return None


class RuleBook:
    """The rules in force for one batch: ``plan(id)`` gives each rule's config for a node."""

    def __init__(self, cache: _Cache | None = None) -> None:
        _at, self.rows, self.rates, self._per_profile = cache or _load()

    def config(self, key: str, profile_id: int | None) -> RuleConfig:
        """Profile row, else default row, else the code's defaults."""
        cfg = self.rows.get((key, profile_id)) or self.rows.get((key, None))
        cfg = cfg or RuleConfig.from_spec(REGISTRY[key])
        if key == "ib_rate_degraded" and profile_id in self.rates:
            cfg = replace(cfg, params={**cfg.params, "profile_hca_rate_gbps": self.rates[profile_id]})
        return cfg

    def plan(self, profile_id: int | None) -> list[PlanEntry]:
        """(spec, config, screen) of every enabled rule run per report, for nodes of this
        profile; shared by every batch until the cache is dropped (a benign race: two
        threads may both build it, and build the same)."""
        plan = self._per_profile.get(profile_id)
        if plan is None:
            plan = self._per_profile[profile_id] = [
                (spec, cfg, _compile_screen(spec.key, cfg))
                for spec in REGISTRY.values()
                if spec.fn is not None
                for cfg in [self.config(spec.key, profile_id)]
                if cfg.enabled
            ]
        return plan


def cached_book() -> RuleBook | None:
    """The rule book from the cache, or None where reading it would take a statement (cold or
    stale): for callers outside the rules' savepoint (``health.evaluation.reports_are_quiet``)."""
    cache = _cache
    if cache is None or time.monotonic() - cache[0] > TTL_SECONDS:
        return None
    return RuleBook(cache)


def rule_config(key: str, profile_id: int | None = None) -> RuleConfig:
    return RuleBook().config(key, profile_id)
