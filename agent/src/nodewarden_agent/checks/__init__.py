"""Active checks the portal hands out when it considers the node idle.

``run_check(kind, params)`` always returns a result dict for
``POST /api/agent/checks/<id>/result/``: status passed/failed/not_available/error,
a one-line summary, numeric figures, the tail of the tool's output and the times.
A missing tool (no PyTorch/CuPy, no dcgmi, no all_reduce_perf) is "not_available",
never an agent failure; bad params are "error" with the reason.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..collectors.kmsg import Runner, run_command
from ..config import BUILTIN_WORKLOADS, Workload
from ..util import utc_iso

log = logging.getLogger(__name__)

OUTPUT_MAX_BYTES = 64 * 1024
STATUSES = ("passed", "failed", "not_available", "error")


class CheckParamError(ValueError):
    """The portal sent params this check cannot run with."""


@dataclass
class CheckEnv:
    """What a check touches on the host, replaceable in tests."""

    runner: Runner = run_command
    which: Callable[[str], str | None] = shutil.which
    importer: Callable[[str], Any] = importlib.import_module
    # The training-step check runs only these (the agent's config); the portal just names one.
    workloads: Mapping[str, Workload] = field(default_factory=lambda: dict(BUILTIN_WORKLOADS))
    extra: dict[str, Any] = field(default_factory=dict)


def outcome(status: str, summary: str, figures: dict[str, float] | None = None, output: str = "") -> dict[str, Any]:
    assert status in STATUSES, status  # noqa: S101 - a programming error: the checks pass constants
    return {"status": status, "summary": summary[:300], "figures": figures or {}, "output": output}


def param(
    params: dict[str, Any], name: str, kind: type, default: Any, low: float | None = None, high: float | None = None
) -> Any:
    """One validated parameter: right type, within [low, high], else CheckParamError."""
    value = params.get(name, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CheckParamError(f"{name} must be {kind.__name__}, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise CheckParamError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


def tail(text: str, limit: int = OUTPUT_MAX_BYTES) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), where the verdict usually is."""
    data = text.encode(errors="replace")
    return text if len(data) <= limit else data[-limit:].decode(errors="ignore")


def _registry() -> dict[str, Callable[[dict[str, Any], CheckEnv], dict[str, Any]]]:
    from . import dcgm, memtest, nccl, stress, training

    return {
        "gpu_stress": stress.run,
        "dcgm_diag": dcgm.run,
        "nccl_test": nccl.run,
        "memory_test": memtest.run,
        "training_step": training.run,
    }


KINDS = ("gpu_stress", "dcgm_diag", "nccl_test", "memory_test", "training_step")


def run_check(kind: str, params: dict[str, Any] | None = None, env: CheckEnv | None = None) -> dict[str, Any]:
    """Run one check to completion and return its result dict (never raises)."""
    started = utc_iso()
    checks = _registry()
    if kind not in checks:
        result = outcome("error", f"unknown check kind {kind!r}; this agent knows {', '.join(KINDS)}")
    elif not isinstance(params or {}, dict):
        result = outcome("error", "params must be a JSON object")
    else:
        try:
            result = checks[kind](params or {}, env or CheckEnv())
        except CheckParamError as exc:
            result = outcome("error", f"bad params: {exc}")
        except Exception as exc:
            log.exception("check %s crashed", kind)
            result = outcome("error", f"{kind} crashed: {type(exc).__name__}: {exc}", output=traceback.format_exc())
    result["output"] = tail(result.get("output", ""))
    result.update(started_at=started, finished_at=utc_iso())
    return result
