"""Enumerations of the fleet inventory."""

from django.db import models


class SchedulerKind(models.TextChoices):
    """The workload scheduler that runs customer jobs on a cluster's nodes."""

    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    SIMULATED = "simulated", "Simulated (fleet simulator)"
    NONE = "none", "None"
