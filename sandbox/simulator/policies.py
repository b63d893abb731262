"""Named policy settings the simulator can run and compare (``--policy``, ``--compare-policy``).

Each preset is a list of ``remediation.RemediationPolicy`` rows (and rule overrides) written
into the simulation's own database before it starts; "default" writes none, so the built-in
defaults decide (catastrophic: cordon now; degraded: drain when the job ends; warnings: watch;
first rung from the finding's recommended action). A JSON file of rows works too:
``[{"name": ..., "match_rule": ..., "urgency": "now", "first_rung": "reboot"}, ...]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "about": "Built-in defaults: catastrophic findings cordon at once, degraded ones drain when the job ends.",
        "policies": [],
    },
    "aggressive": {
        "about": "Every degraded finding cordons at once and evicts the job, as catastrophic ones do.",
        "policies": [
            {"name": "sim: degraded now", "priority": 10, "match_severity": "degraded", "urgency": "now"},
        ],
    },
    "patient": {
        "about": "An InfiniBand port down and GPU temperature are watched, not acted on (an operator looks).",
        "policies": [
            {"name": "sim: watch ib ports", "priority": 10, "match_rule": "ib_port_down", "urgency": "watch"},
            {"name": "sim: watch gpu temperature", "priority": 11, "match_rule": "gpu_temperature", "urgency": "watch"},
        ],
    },
    "reboot-first": {
        "about": "Skip the GPU reset: every actionable finding starts at a reboot.",
        "policies": [
            {
                "name": "sim: catastrophic reboot",
                "priority": 10,
                "match_severity": "catastrophic",
                "urgency": "now",
                "first_rung": "reboot",
            },
            {
                "name": "sim: degraded reboot",
                "priority": 11,
                "match_severity": "degraded",
                "urgency": "when_idle",
                "first_rung": "reboot",
            },
        ],
    },
}


def load(name_or_path: str) -> tuple[str, str, list[dict[str, Any]]]:
    """(name, description, policy rows) of a preset or a JSON file; ValueError naming the choices."""
    if name_or_path in PRESETS:
        preset = PRESETS[name_or_path]
        return name_or_path, preset["about"], preset["policies"]
    path = Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        rows = json.loads(path.read_text())
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path}: expected a JSON list of policy objects")
        return path.stem, f"policies from {path}", rows
    raise ValueError(f"Unknown policy {name_or_path!r}: one of {', '.join(PRESETS)}, or a .json file of policies")


def install(rows: list[dict[str, Any]]) -> None:
    """Write the rows as RemediationPolicy objects (validated like the admin form would)."""
    from remediation.models import RemediationPolicy

    for i, row in enumerate(rows):
        policy = RemediationPolicy(**{"priority": 10 + i, **row})
        policy.full_clean()
        policy.save()
