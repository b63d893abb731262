"""Effective rule settings per hardware profile, cached in-process for the ingest hot path.

The cache holds every ``HealthRule`` row and every profile's HCA rate; it is dropped when
a rule is saved (signal in ``apps.py``) and re-read at most every ``TTL_SECONDS`` anyway,
so a change made by another process is picked up quickly.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from fleet.models import HardwareProfile

from .rules import REGISTRY, RuleConfig

TTL_SECONDS = 30.0

_lock = threading.Lock()
_cache: tuple[float, dict[tuple[str, int | None], RuleConfig], dict[int, int]] | None = None


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


def _load() -> tuple[dict[tuple[str, int | None], RuleConfig], dict[int, int]]:
    from .models import HealthRule

    global _cache
    with _lock:
        if _cache is None or time.monotonic() - _cache[0] > TTL_SECONDS:
            rows = {(r.key, r.hardware_profile_id): _row_config(r) for r in HealthRule.objects.all()}
            rates = dict(HardwareProfile.objects.values_list("id", "hca_rate_gbps"))
            _cache = (time.monotonic(), rows, rates)
        return _cache[1], _cache[2]


class RuleBook:
    """The rules in force for one batch: ``for_profile(id)`` gives each rule's config for a node."""

    def __init__(self) -> None:
        self.rows, self.rates = _load()
        self._per_profile: dict[int | None, list[tuple[Any, RuleConfig]]] = {}

    def config(self, key: str, profile_id: int | None) -> RuleConfig:
        """Profile row, else default row, else the code's defaults."""
        cfg = self.rows.get((key, profile_id)) or self.rows.get((key, None))
        cfg = cfg or RuleConfig.from_spec(REGISTRY[key])
        if key == "ib_rate_degraded" and profile_id in self.rates:
            cfg = replace(cfg, params={**cfg.params, "profile_hca_rate_gbps": self.rates[profile_id]})
        return cfg

    def for_profile(self, profile_id: int | None) -> list[tuple[Any, RuleConfig]]:
        """(spec, config) of every enabled rule run per report, for nodes of this profile."""
        if profile_id not in self._per_profile:
            self._per_profile[profile_id] = [
                (spec, cfg)
                for spec in REGISTRY.values()
                if spec.fn is not None
                for cfg in [self.config(spec.key, profile_id)]
                if cfg.enabled
            ]
        return self._per_profile[profile_id]


def rule_config(key: str, profile_id: int | None = None) -> RuleConfig:
    return RuleBook().config(key, profile_id)
