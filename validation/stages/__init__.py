"""The Day 1 stages' own logic: what each one starts, and how each one decides.

Each stage module exposes ``start(ctx) -> Verdict | None`` and ``poll(ctx) -> Verdict | None``.
``None`` means "still going": the pipeline polls again later (``validation.tasks``).
Stages never change a node's state themselves; ``validation.services.conclude`` does,
from their verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from ..choices import Stage
from . import burn_in, fabric, firmware, inventory, reliability
from .base import StageContext, Verdict

RUNNERS: dict[str, ModuleType] = {
    Stage.FIRMWARE: firmware,
    Stage.INVENTORY: inventory,
    Stage.BURN_IN: burn_in,
    Stage.FABRIC: fabric,
    Stage.RELIABILITY: reliability,
}

StageStep = Callable[[StageContext], Verdict | None]

__all__ = ["RUNNERS", "StageContext", "StageStep", "Verdict"]
