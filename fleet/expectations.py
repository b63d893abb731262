"""Expected figures of the training-step check, per hardware profile and workload.

``HardwareProfile.workload_expectations`` maps a workload name (as configured in the node
agents' ``workloads`` setting) to the figures a healthy node of the profile reaches, e.g.
``{"tiny-train": {"min_samples_per_s": 20000, "max_loss": 2.5, "max_seconds": 60}}``.
The portal judges every run against them (``checks.workloads``); the loss must always be
finite. A workload name missing here can still be asked for when it is the builtin one.
"""

from __future__ import annotations

import math
import re
from typing import Any

from django.core.exceptions import ValidationError

# The agent's config checks the same pattern (agent/src/nodewarden_agent/config.py).
WORKLOAD_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
# expected figure -> (reported figure, "min" or "max", what it means)
EXPECTED_FIGURES: dict[str, tuple[str, str, str]] = {
    "min_samples_per_s": ("samples_per_s", "min", "throughput"),
    "max_loss": ("loss", "max", "final loss"),
    "max_seconds": ("seconds", "max", "time"),
}
MAX_WORKLOADS = 50


def validate_workload_expectations(value: Any) -> None:
    """A JSON object of workload name -> {expected figure: non-negative number}."""
    if not isinstance(value, dict):
        raise ValidationError('Must be a JSON object, e.g. {"tiny-train": {"min_samples_per_s": 20000}}.')
    if len(value) > MAX_WORKLOADS:
        raise ValidationError(f"At most {MAX_WORKLOADS} workloads.")
    for name, expected in value.items():
        if not WORKLOAD_NAME.match(name):
            raise ValidationError(f"{name!r}: a workload name is lower-case letters, digits, '.', '_' or '-'.")
        if not isinstance(expected, dict):
            raise ValidationError(f"{name}: must be an object of expected figures.")
        for key, number in expected.items():
            if key not in EXPECTED_FIGURES:
                raise ValidationError(
                    f"{name}: unknown expected figure {key!r} (known: {', '.join(EXPECTED_FIGURES)})."
                )
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise ValidationError(f"{name}.{key}: must be a number, got {number!r}.")
            if number < 0:
                raise ValidationError(f"{name}.{key}: must not be negative.")
