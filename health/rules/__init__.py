"""Health rules, one module per family, registered by key in ``base.REGISTRY``.

Importing this package registers every rule; ``REGISTRY`` order is evaluation order.
"""

from . import gpu, host, ib, xid  # noqa: F401  (registration side effects)
from .base import REGISTRY, RuleConfig, RuleSpec

__all__ = ["REGISTRY", "RuleConfig", "RuleSpec"]
