"""What each active check accepts, how long it may run, and how its figures read.

One table per kind, so the API, the portal form and the agent contract agree.
The node agent runs the tool with the normalised params stored on the run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from fleet.expectations import WORKLOAD_NAME
from nodes.choices import ACTIVE_KINDS, RunKind
from nodes.models import Node

from .workloads import DEFAULT_WORKLOAD, known_workloads

# nccl-tests' -b/-e syntax: a byte count with an optional K, M or G suffix.
BYTE_SIZE = re.compile(r"^[1-9][0-9]*[KMG]?$")
BYTE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class Param:
    """One parameter: its default for a node, and a cleaner that returns the normalised value
    or raises ValueError with a message for the operator."""

    default: Callable[[Node], Any]
    clean: Callable[[Any, Node], Any]


def integer(low: int, high: int | Callable[[Node], int]) -> Callable[[Any, Node], int]:
    def clean(value: Any, node: Node) -> int:
        top = high(node) if callable(high) else high
        # bool is an int subclass in Python; true/false is never a count.
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top:
            raise ValueError(f"must be a whole number from {low} to {top}")
        return value

    return clean


def number(low: float, high: float) -> Callable[[Any, Node], float]:
    def clean(value: Any, node: Node) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise ValueError(f"must be a number from {low} to {high}")
        return float(value)

    return clean


def one_of(*choices: str) -> Callable[[Any, Node], str]:
    def clean(value: Any, node: Node) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return str(value)

    return clean


def byte_size(value: Any, node: Node) -> int:
    """A byte count as nccl-tests' -b/-e take it ("8", "128M", "8G", or a number); the agent gets an int."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if not isinstance(value, str) or not BYTE_SIZE.match(value):
        raise ValueError('must be a byte count such as 8, "128M" or "8G"')
    unit = value[-1] if value[-1] in BYTE_UNITS else ""
    return int(value.rstrip("KMG")) * BYTE_UNITS[unit]


def workload_name(value: Any, node: Node) -> str:
    """A workload the node's profile has expected figures for, or a builtin one. The name is all
    the portal sends: what it runs is in the node agent's config, out of the portal's reach."""
    known = known_workloads(node)
    if not isinstance(value, str) or not WORKLOAD_NAME.match(value) or value not in known:
        raise ValueError(f"must be a workload known for this node's hardware profile: {', '.join(known)}")
    return value


def _constant(value: Any) -> Callable[[Node], Any]:
    return lambda node: value


def _gpu_count(node: Node) -> int:
    return node.hardware_profile.gpu_count


PARAMS: dict[str, dict[str, Param]] = {
    RunKind.GPU_STRESS: {
        "seconds": Param(_constant(60), integer(1, 3600)),
        "matrix_size": Param(_constant(8192), integer(1024, 32768)),
        "dtype": Param(_constant("bf16"), one_of("bf16", "fp16", "fp32")),
        # A floor per GPU; below it the run fails. 0: only errors fail it.
        "min_tflops": Param(_constant(0.0), number(0, 10_000)),
    },
    RunKind.DCGM_DIAG: {"level": Param(_constant(2), integer(1, 4))},
    RunKind.NCCL_TEST: {
        "min_bytes": Param(_constant(8), byte_size),  # "8"
        "max_bytes": Param(_constant(8 * BYTE_UNITS["G"]), byte_size),  # "8G"
        "gpus": Param(_gpu_count, integer(1, _gpu_count)),
    },
    RunKind.MEMORY_TEST: {"fraction": Param(_constant(0.9), number(0.1, 0.95))},
    RunKind.TRAINING_STEP: {"workload": Param(_constant(DEFAULT_WORKLOAD), workload_name)},
}


def normalise_params(kind: str, params: Any, node: Node) -> dict[str, Any]:
    """The params with defaults filled in; raises ValidationError naming every bad or unknown one."""
    if kind not in ACTIVE_KINDS:
        raise ValidationError({"kind": [f"Unknown check kind {kind!r}; choose one of {', '.join(ACTIVE_KINDS)}."]})
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ValidationError({"params": ["Must be a JSON object."]})
    spec = PARAMS[kind]
    # Unknown names are refused, not ignored: a typo must not silently run the default.
    errors = [f"{name}: unknown parameter for {kind} (known: {', '.join(spec)})" for name in params if name not in spec]
    result: dict[str, Any] = {}
    for name, param in spec.items():
        try:
            result[name] = param.clean(params[name], node) if name in params else param.default(node)
        except ValueError as exc:
            errors.append(f"{name}: {exc} (got {params[name]!r})")
    if kind == RunKind.NCCL_TEST and not errors and result["min_bytes"] > result["max_bytes"]:
        errors.append("min_bytes: must not be larger than max_bytes")
    if errors:
        raise ValidationError({"params": errors})
    return result


# How long a claimed run may take before the sweep marks it as an error. Generous: the
# deadline catches a dead agent, not a slow test.
DCGM_LEVEL_TIMEOUT = {1: timedelta(minutes=5), 2: timedelta(minutes=15), 3: timedelta(hours=1), 4: timedelta(hours=3)}
SLACK = timedelta(minutes=5)


def run_timeout(kind: str, params: Mapping[str, Any]) -> timedelta:
    """The most a claimed run of this kind and these params may take, from claim to result."""
    if kind == RunKind.GPU_STRESS:
        return timedelta(seconds=params.get("seconds", 60)) + SLACK
    if kind == RunKind.DCGM_DIAG:
        return DCGM_LEVEL_TIMEOUT.get(params.get("level", 2), DCGM_LEVEL_TIMEOUT[4]) + SLACK
    if kind == RunKind.NCCL_TEST:
        return timedelta(minutes=30)
    return timedelta(hours=1)


def _number(value: float) -> str:
    return f"{value:,.1f}".removesuffix(".0")


def _gpu_stress(f: Mapping[str, Any]) -> str | None:
    per_gpu = [name for name in f if re.fullmatch(r"gpu\d+_tflops", name)]
    if "min_tflops" not in f:
        return None
    gpus = f"{len(per_gpu)} GPU" + ("" if len(per_gpu) == 1 else "s")
    return f"min {_number(f['min_tflops'])} TFLOP/s over {gpus}" + (
        f", {_number(f['errors'])} errors" if f.get("errors") else ""
    )


def _dcgm_diag(f: Mapping[str, Any]) -> str | None:
    if "tests_failed" not in f or "tests_passed" not in f:
        return None
    level = f" (level {_number(f['level'])})" if "level" in f else ""
    return f"{_number(f['tests_failed'])} failed, {_number(f['tests_passed'])} passed{level}"


def _nccl_test(f: Mapping[str, Any]) -> str | None:
    return f"busbw {_number(f['busbw_gbps'])} GB/s" if "busbw_gbps" in f else None


def _training_step(f: Mapping[str, Any]) -> str | None:
    if "samples_per_s" not in f:
        return None
    loss = "loss not finite" if f.get("loss_finite") == 0 else f"loss {f['loss']:.4g}" if "loss" in f else "no loss"
    return f"{_number(f['samples_per_s'])} samples/s, {loss}"


def _memory_test(f: Mapping[str, Any]) -> str | None:
    if "bytes_tested" not in f or "mismatches" not in f:
        return None
    return f"{_number(f['bytes_tested'] / 2**30)} GiB tested, {_number(f['mismatches'])} mismatches"


# The figures the node agent sends (agent/src/nodewarden_agent/checks/): gpu_stress
# gpuN_tflops, min_tflops, errors; dcgm_diag tests_passed/failed/skipped/warned, level;
# nccl_test busbw_gbps (average), max_busbw_gbps, wrong; memory_test bytes_tested, mismatches;
# training_step what the workload printed (samples_per_s, loss, steps, seconds, ...) and loss_finite.
HEADLINES: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    RunKind.GPU_STRESS: _gpu_stress,
    RunKind.DCGM_DIAG: _dcgm_diag,
    RunKind.NCCL_TEST: _nccl_test,
    RunKind.MEMORY_TEST: _memory_test,
    RunKind.TRAINING_STEP: _training_step,
}


def describe_figures(kind: str, figures: Mapping[str, Any]) -> str:
    """A short human reading of a run's figures, e.g. "busbw 362 GB/s"; all of them when
    the kind's headline figures are missing."""
    if not figures:
        return ""
    headline = HEADLINES[kind](figures) if kind in HEADLINES else None
    if headline is not None:
        return headline
    return ", ".join(
        f"{name} {_number(value)}" if isinstance(value, int | float) else f"{name} {value}"
        for name, value in sorted(figures.items())
    )
