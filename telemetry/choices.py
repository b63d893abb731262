"""Choices of the telemetry app: the agent command channel's verbs and statuses."""

from __future__ import annotations

from django.db import models


class CommandVerb(models.TextChoices):
    """What the portal may ask a node's agent to do: a fixed set, each with typed arguments
    (``telemetry.commands.clean_args``). Active checks keep their own road (``checks``)."""

    RESET_GPU = "reset_gpu", "Reset a GPU"
    REBOOT = "reboot", "Reboot the node"
    COLLECT_DIAGNOSTICS = "collect_diagnostics", "Collect a diagnostics bundle"


class CommandStatus(models.TextChoices):
    """Where a command is: queued until the agent's poll takes it (delivered), then its result."""

    QUEUED = "queued", "Queued"
    DELIVERED = "delivered", "Delivered"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    EXPIRED = "expired", "Expired"


FINISHED_COMMAND_STATUSES = (CommandStatus.SUCCEEDED, CommandStatus.FAILED, CommandStatus.EXPIRED)
# What an agent may report: the outcome of a command it was handed.
COMMAND_OUTCOMES = (CommandStatus.SUCCEEDED, CommandStatus.FAILED)
# The parts of a diagnostics bundle; the agent knows how to gather each, nothing else.
DIAGNOSTIC_PARTS = ("kernel_log", "nvidia_smi", "infiniband")
