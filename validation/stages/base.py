"""What a stage sees and what it answers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodes.models import Node, Run

from ..models import Day1Spec


@dataclass(frozen=True)
class StageContext:
    """One stage run on one node: the run row (its ``details`` carry the stage's own state),
    the node with its hardware profile, the profile's Day 1 spec, and the time now."""

    run: Run
    node: Node
    spec: Day1Spec
    now: datetime


@dataclass(frozen=True)
class Verdict:
    """How a stage ended. ``summary`` is what an operator reads first (the exact difference
    on a failure); ``evidence`` goes on the finding; ``figures`` on the run."""

    passed: bool
    summary: str
    figures: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fail(cls, summary: str, **evidence: Any) -> Verdict:
        return cls(False, summary, evidence=evidence)


def natural_key(version: str) -> tuple[tuple[int, Any], ...]:
    """A sort key that orders firmware versions as vendors number them: "1.10" after "1.9",
    "U46 v2.10" after "U46 v2.9". Numbers compare as numbers, other runs as text."""
    parts = re.findall(r"\d+|[A-Za-z]+", version or "")
    return tuple((0, int(p)) if p.isdigit() else (1, p.lower()) for p in parts)


def version_behind(current: str, baseline: str) -> bool:
    return natural_key(current) < natural_key(baseline)
