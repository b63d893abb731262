"""Enumerations of the fleet inventory."""

from django.db import models


class SchedulerKind(models.TextChoices):
    """The product's workload schedulers (constants for code); the kinds a cluster may name are
    registered by the apps that bring them (fleet/schedulerkinds.py)."""

    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    NONE = "none", "No scheduler"
