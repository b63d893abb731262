"""Kinds and outcomes of recorded runs."""
from django.db import models


class RunKind(models.TextChoices):
    """What a run did. Later stages (firmware, burn-in, ...) add their kinds here."""

    TRANSITION_FOLLOWUP = "transition_followup", "Transition follow-up"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    SUPERSEDED = "superseded", "Superseded"
    ERROR = "error", "Error"


FINISHED = (RunStatus.PASSED, RunStatus.FAILED, RunStatus.SUPERSEDED, RunStatus.ERROR)
