"""Kinds of trend flags, with their labels, badge colours and the health rule each raises:
the one place pages, filters, the API and the findings read them."""

from __future__ import annotations

from django.db import models


class FlagKind(models.TextChoices):
    """What the daily evaluation found about a node."""

    DEGRADING = "degrading", "Degrading"  # a figure's trend over weeks crosses its threshold
    UNDERPERFORMER = "underperformer", "Underperformer"  # well below its hardware profile's peers
    LEMON = "lemon", "Lemon node"  # fails again and again (weighted signals, Meta FAIR)


FLAG_COLOURS: dict[str, str] = {
    FlagKind.DEGRADING: "#d4ac0d",
    FlagKind.UNDERPERFORMER: "#e67e22",
    FlagKind.LEMON: "#c0392b",
}

# The health rule and severity each kind raises (health.services.raise_finding): degraded
# findings are the ones the remediation engine acts on; a slow drift is watched (warning).
FINDING_RULES: dict[str, tuple[str, str]] = {
    FlagKind.DEGRADING: ("trend_degrading", "warning"),
    FlagKind.UNDERPERFORMER: ("peer_underperformer", "degraded"),
    FlagKind.LEMON: ("lemon_node", "degraded"),
}
LEMON_FIGURE = "lemon_score"
