"""Day 1 configuration: per hardware profile thresholds, and per re-entry reason plans.

The stage runs themselves are ``checks.Run`` rows (kinds ``stage_*``), like every
other run on a node, so the node's history and the run list show them without a join.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import models

from fleet.models import HardwareProfile

from .choices import MAINTENANCE_PLANS, Reentry, Stage


class Day1Spec(models.Model):
    """What a node of a hardware profile must show in Day 1, and how long each stage may take.

    A profile without a spec uses the defaults (``Day1Spec.for_profile``). Zero thresholds
    mean "only errors fail": the figures are still recorded for trend analysis.
    """

    hardware_profile = models.OneToOneField(HardwareProfile, on_delete=models.CASCADE, related_name="day1_spec")
    burn_in_seconds = models.PositiveIntegerField(default=600, help_text="GPU stress duration per run.")
    min_tflops_per_gpu = models.FloatField(default=0.0, help_text="GPU stress floor, TFLOP/s on every GPU.")
    dcgm_level = models.PositiveSmallIntegerField(default=2, help_text="dcgmi diag level (1-4).")
    min_busbw_gbps = models.FloatField(default=0.0, help_text="NCCL all_reduce_perf bus bandwidth floor, GB/s.")
    memory_test_fraction = models.FloatField(default=0.9, help_text="Share of GPU memory the memory test covers.")
    require_all_tools = models.BooleanField(
        default=False,
        help_text="Fail burn-in when DCGM or nccl-tests is not installed on the node "
        "(otherwise recorded as not available).",
    )
    soak_seconds = models.PositiveIntegerField(
        default=4 * 3600, help_text="Reliability assessment: how long the node runs with no finding above warning."
    )
    stage_timeout_seconds = models.PositiveIntegerField(
        default=3600,
        help_text="Most a stage may take beyond its own duration (burn-in, soak) before the node "
        "goes to triage as stuck.",
    )
    memory_tolerance = models.FloatField(
        default=0.05, help_text="Host memory the OS may hide (firmware, kernel) before the inventory check fails."
    )

    class Meta:
        verbose_name = "Day 1 specification"

    def __str__(self) -> str:
        return f"Day 1 spec for {self.hardware_profile}"

    @classmethod
    def for_profile(cls, profile: HardwareProfile) -> Day1Spec:
        """The profile's spec, or an unsaved one with the defaults."""
        return cls.objects.filter(hardware_profile=profile).first() or cls(hardware_profile=profile)

    def clean(self) -> None:
        if not 1 <= self.dcgm_level <= 4:
            raise ValidationError({"dcgm_level": "DCGM diagnostics levels are 1 to 4."})
        if not 0.1 <= self.memory_test_fraction <= 0.95:
            raise ValidationError({"memory_test_fraction": "Between 0.1 and 0.95 of GPU memory."})

    def timeout(self, stage: str) -> timedelta:
        """How long a run of ``stage`` may stay open before it fails as stuck."""
        budgets: dict[str, int] = {Stage.BURN_IN: self.burn_in_seconds * 2, Stage.RELIABILITY: self.soak_seconds}
        own = budgets.get(stage, 0)
        return timedelta(seconds=own + self.stage_timeout_seconds)


class RevalidationPlan(models.Model):
    """Which Day 1 stages a node walks, by why it walks them. Without a plan: every stage, except
    after maintenance (``validation.choices.MAINTENANCE_PLANS``, by what was done).

    Stages left out are recorded as skipped runs ("not in the plan"), so the history
    says what was and was not re-checked.
    """

    reentry = models.CharField(max_length=20, choices=Reentry.choices, unique=True)
    stages = models.JSONField(help_text=f"Stages to run, any of: {', '.join(Stage.values)}.")
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["reentry"]

    def __str__(self) -> str:
        return f"{self.get_reentry_display()}: {', '.join(self.stages)}"

    def clean(self) -> None:
        if not isinstance(self.stages, list) or not self.stages:
            raise ValidationError({"stages": "A non-empty list of stages."})
        unknown = [s for s in self.stages if s not in Stage.values]
        if unknown:
            raise ValidationError(
                {"stages": f"Unknown stage(s) {', '.join(map(str, unknown))}; choose from {', '.join(Stage.values)}."}
            )

    @classmethod
    def stages_for(cls, reentry: str) -> list[str]:
        """The plan's stages; without a plan, every stage (after maintenance: ``MAINTENANCE_PLANS``)."""
        plan = cls.objects.filter(reentry=reentry).first()
        return list(plan.stages) if plan else list(MAINTENANCE_PLANS.get(reentry, Stage.values))


class PersonaChange(models.Model):
    """A node re-roled to another persona: drained, reconfigured, re-validated with the
    persona's stages and returned to production, each step on the node's history."""

    class Status(models.TextChoices):
        DRAINING = "draining", "Waiting for the drain"
        VALIDATING = "validating", "Re-validating"
        DONE = "done", "Back in production"
        CANCELLED = "cancelled", "Cancelled"

    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="persona_changes")
    from_persona = models.ForeignKey("fleet.Persona", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    to_persona = models.ForeignKey("fleet.Persona", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAINING)
    reason = models.TextField()
    requested_by = models.CharField(max_length=150, help_text="Username, or system:<component>.")
    created = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    OPEN = (Status.DRAINING, Status.VALIDATING)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                condition=models.Q(status__in=["draining", "validating"]),
                name="one_open_persona_change_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node} -> {self.to_persona} ({self.get_status_display()})"
