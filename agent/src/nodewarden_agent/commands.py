"""Commands from the portal: a fixed set of verbs with typed arguments, nothing else.

``execute(command, env)`` always returns a result dict for
``POST /api/agent/commands/<id>/result/``: status succeeded/failed, a one-line summary and
a small ``result`` object. The portal never sends a command line: each verb builds its own
argv here from checked arguments, so a compromised portal can reset a GPU, reboot, or read
the diagnostics below, and no more. An unknown verb or a bad argument is refused (failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collectors.infiniband import SYSFS_ROOT, InfinibandCollector
from .collectors.kmsg import Runner, run_command

log = logging.getLogger(__name__)

PART_MAX_BYTES = 64 * 1024  # each part of a diagnostics bundle: the portal caps the whole at 512 KiB
MAX_GPU_INDEX = 63
DIAGNOSTIC_PARTS = ("kernel_log", "nvidia_smi", "infiniband")
RESET_TIMEOUT_S = 120.0
TOOL_TIMEOUT_S = 60.0


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; absent on a node without the NVIDIA driver stack

    return pynvml


@dataclass
class CommandEnv:
    """What a command touches on the host, replaceable in tests (no test may reboot its machine)."""

    runner: Runner = run_command
    nvml: Callable[[], Any] = _load_pynvml
    ib_root: Path = SYSFS_ROOT
    extra: dict[str, Any] = field(default_factory=dict)


class CommandRefused(ValueError):
    """The portal sent a verb or arguments this agent does not run."""


def outcome(status: str, summary: str, result: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": status, "summary": summary[:300], "result": result or {}}


def tail(text: str, limit: int = PART_MAX_BYTES) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8): the newest kernel lines, the tool's verdict."""
    data = text.encode(errors="replace")
    return text if len(data) <= limit else data[-limit:].decode(errors="ignore")


def _gpu_index(args: dict[str, Any]) -> int:
    gpu = args.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= MAX_GPU_INDEX:
        raise CommandRefused(f"gpu must be an integer from 0 to {MAX_GPU_INDEX}, got {gpu!r}")
    if set(args) != {"gpu"}:
        raise CommandRefused(f"reset_gpu takes only gpu, got {sorted(args)}")
    return gpu


def _gpu_processes(env: CommandEnv, index: int) -> int:
    """Processes NVML sees on the GPU (compute and graphics); raises if NVML cannot tell."""
    nvml = env.nvml()
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        graphics = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None)
        if graphics is not None:
            processes += [p for p in graphics(handle) if p.pid not in {q.pid for q in processes}]
        return len(processes)
    finally:
        nvml.nvmlShutdown()


def reset_gpu(args: dict[str, Any], env: CommandEnv) -> dict[str, Any]:
    """``nvidia-smi --gpu-reset -i N``, only when NVML shows no process on that GPU: a reset under
    a job kills it. When NVML cannot say (not installed, the GPU lost), nothing is reset."""
    index = _gpu_index(args)
    try:
        busy = _gpu_processes(env, index)
    except Exception as exc:  # ImportError, NVMLError of any kind: we cannot tell the GPU is free
        return outcome("failed", f"not reset: NVML cannot list processes on GPU {index}: {exc}")
    if busy:
        return outcome("failed", f"busy: {busy} processes", {"gpu": index, "processes": busy})
    done = env.runner(["nvidia-smi", "--gpu-reset", "-i", str(index)], timeout=RESET_TIMEOUT_S)
    output = tail((done.stdout or "") + (done.stderr or ""), 4096)
    if done.returncode != 0:
        return outcome("failed", f"nvidia-smi --gpu-reset exited {done.returncode}", {"gpu": index, "output": output})
    return outcome("succeeded", f"GPU {index} reset", {"gpu": index, "output": output})


def reboot(args: dict[str, Any], env: CommandEnv) -> dict[str, Any]:
    """``systemctl reboot``: it queues the reboot and returns, so the result is stored (and usually
    sent) before the node goes down; a result not sent goes after the node is back."""
    if args:
        raise CommandRefused(f"reboot takes no arguments, got {sorted(args)}")
    done = env.runner(["systemctl", "reboot"], timeout=TOOL_TIMEOUT_S)
    if done.returncode != 0:
        return outcome("failed", f"systemctl reboot exited {done.returncode}: {(done.stderr or '').strip()[:200]}")
    return outcome("succeeded", "reboot requested")


def _run_part(env: CommandEnv, argv: list[str]) -> str:
    done = env.runner(argv, timeout=TOOL_TIMEOUT_S)
    if done.returncode != 0:
        raise OSError(f"{argv[0]} exited {done.returncode}: {(done.stderr or '').strip()[:300]}")
    return tail(done.stdout or "")


def _infiniband(env: CommandEnv) -> list[dict[str, Any]]:
    keep = ("device", "port", "state", "phys_state", "rate_gbps", "link_layer")
    ports = InfinibandCollector(env.ib_root).collect().fields.get("ib_ports", [])
    return [{k: port[k] for k in keep if k in port} for port in ports]


def collect_diagnostics(args: dict[str, Any], env: CommandEnv) -> dict[str, Any]:
    """A bounded bundle: kernel log tail, ``nvidia-smi -q``, InfiniBand port states. A part that
    cannot be read is named in ``errors``; the bundle fails only when no part could be read."""
    parts = args.get("collect", list(DIAGNOSTIC_PARTS))
    if set(args) - {"collect"} or not isinstance(parts, list) or not set(parts) <= set(DIAGNOSTIC_PARTS):
        raise CommandRefused(f"collect must be a list of {', '.join(DIAGNOSTIC_PARTS)}, got {args!r}")
    readers: dict[str, Callable[[], Any]] = {
        "kernel_log": lambda: _run_part(env, ["dmesg", "--kernel", "--time-format", "iso"]),
        "nvidia_smi": lambda: _run_part(env, ["nvidia-smi", "-q"]),
        "infiniband": lambda: _infiniband(env),
    }
    bundle: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for part in (p for p in DIAGNOSTIC_PARTS if p in parts):
        try:
            bundle[part] = readers[part]()
        except Exception as exc:  # a missing tool or file is a note in the bundle, not a lost bundle
            errors[part] = f"{type(exc).__name__}: {exc}"[:300]
    status = "succeeded" if bundle else "failed"
    summary = f"collected {', '.join(bundle) or 'nothing'}" + (f"; unreadable: {', '.join(errors)}" if errors else "")
    return outcome(status, summary, {**bundle, "errors": errors})


VERBS: dict[str, Callable[[dict[str, Any], CommandEnv], dict[str, Any]]] = {
    "reset_gpu": reset_gpu,
    "reboot": reboot,
    "collect_diagnostics": collect_diagnostics,
}


def execute(command: dict[str, Any], env: CommandEnv | None = None) -> dict[str, Any]:
    """Run one command from the portal and return its result dict (never raises)."""
    env = env or CommandEnv()
    verb, args = command.get("verb"), command.get("args") or {}
    run = VERBS.get(verb) if isinstance(verb, str) else None
    if run is None:
        return outcome("failed", f"refused: unknown verb {verb!r}")
    if not isinstance(args, dict):
        return outcome("failed", f"refused: args must be an object, got {type(args).__name__}")
    try:
        return run(args, env)
    except CommandRefused as exc:
        return outcome("failed", f"refused: {exc}")
    except Exception as exc:  # a command must always answer, or the portal waits for ever
        log.exception("command %s (%s) failed", command.get("id"), verb)
        return outcome("failed", f"{type(exc).__name__}: {exc}")
