"""Freshness targets: how old an active check that passed may be on a production node, per hardware profile.

The runs themselves are ``nodes.models.Run`` (every app records its runs there); what is owed
per profile lives here, next to the scheduler of checks that keeps it (``checks.freshness``).
"""

from __future__ import annotations

from django.db import models

from fleet.models import HardwareProfile
from nodes.choices import ACTIVE_KINDS, RunKind

ACTIVE_KIND_CHOICES = [(kind, RunKind(kind).label) for kind in ACTIVE_KINDS]


class FreshnessTarget(models.Model):
    """One profile's target for one active check kind, overriding the default
    (``checks.freshness.DEFAULT_TARGETS``); an empty ``max_age`` takes the kind off the profile."""

    profile = models.ForeignKey(HardwareProfile, on_delete=models.CASCADE, related_name="freshness_targets")
    kind = models.CharField(max_length=40, choices=ACTIVE_KIND_CHOICES)
    max_age = models.DurationField(
        null=True,
        blank=True,
        help_text='How long ago the last passed run of this kind may have finished, e.g. "7 00:00:00" '
        "(7 days). Empty: this kind is not required on nodes of the profile.",
    )

    class Meta:
        ordering = ["profile__name", "kind"]
        constraints = [models.UniqueConstraint(fields=["profile", "kind"], name="one_freshness_target_per_kind")]

    def __str__(self) -> str:
        return f"{self.profile}: {self.kind}"
