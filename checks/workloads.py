"""Judging a training-step run: the figures the agent read against the profile's expected ones.

The agent runs the workload its own config names and reports what it printed; the verdict
is the portal's, so every node of a hardware profile is held to the same figures
(``HardwareProfile.workload_expectations``) and a profile's numbers change in one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fleet.expectations import EXPECTED_FIGURES
from nodes.choices import RunStatus
from nodes.models import Node

# Shipped with the agent; with no expected figures on the profile only a finite loss is asked.
BUILTIN_WORKLOADS = ("tiny-train",)
DEFAULT_WORKLOAD = "tiny-train"


def known_workloads(node: Node) -> list[str]:
    """The workload names a training-step check on this node may ask for."""
    return sorted({*BUILTIN_WORKLOADS, *(node.hardware_profile.workload_expectations or {})})


def expected_figures(node: Node, workload: str) -> dict[str, float]:
    """What the node's profile expects of the workload ({} when it sets nothing)."""
    return dict((node.hardware_profile.workload_expectations or {}).get(workload) or {})


def shortfalls(figures: Mapping[str, Any], expected: Mapping[str, float]) -> list[str]:
    """Why the figures miss the expected ones, one line each; [] when they meet them."""
    problems = []
    if figures.get("loss_finite") == 0.0:
        problems.append("loss is not finite (NaN or infinity)")
    elif "loss" not in figures:
        problems.append("the workload reported no loss")
    # In EXPECTED_FIGURES' order, not the stored JSON's (PostgreSQL's jsonb reorders keys).
    for key, (figure, side, meaning) in EXPECTED_FIGURES.items():
        if key not in expected:
            continue
        limit = expected[key]
        value = figures.get(figure)
        if value is None:
            if not (figure == "loss" and problems):  # a missing or NaN loss is said once
                problems.append(f"the workload reported no {figure} ({meaning}; expected {side} {limit:g})")
        elif side == "min" and value < limit:
            problems.append(f"{meaning} {figure} {value:g} below the expected {limit:g}")
        elif side == "max" and value > limit:
            problems.append(f"{meaning} {figure} {value:g} above the expected {limit:g}")
    return problems


def judge(node: Node, workload: str, result: Any) -> Any:
    """The agent's result with the portal's verdict: a run that ran ("passed" from the agent)
    fails when its figures miss the profile's expected ones. Other outcomes stand."""
    if result.status != RunStatus.PASSED:
        return result
    problems = shortfalls(result.figures, expected_figures(node, workload))
    if not problems:
        return result
    return dataclasses.replace(result, status=RunStatus.FAILED, summary=f"{workload}: " + "; ".join(problems))
