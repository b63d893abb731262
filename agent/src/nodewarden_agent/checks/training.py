"""Training-step check: run a workload named in the agent's config and read its figures.

The portal sends only ``{"workload": name}``; what that name runs (argv, time limit) is in
the node's own config (``config.Workload``), so the portal cannot make the agent run any
other command. The command runs without a shell, in its own process group (killed whole on
timeout), with the agent's environment minus every ``NODEWARDEN_*`` variable (the portal
token stays with the agent), and only the last 64 KiB of each output stream is kept.

The workload contract: print one JSON object on a line of stdout (the last such line
counts), e.g. ``{"samples_per_s": 5120.0, "loss": 0.41, "steps": 40, "seconds": 2.0}``;
exit 0. Other numeric keys are passed on as figures. ``{"not_available": "why"}`` says the
workload cannot run on this node (a library missing), which is not a hardware failure.
The agent does not judge the figures: the portal compares them with the hardware profile's
expected figures, so every node of a profile is held to the same numbers.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import OUTPUT_MAX_BYTES, CheckEnv, outcome, param

MAX_FIGURES = 32  # the portal takes 64; a workload's extra keys must not crowd out the contract's
FIGURE_NAME_MAX = 64
KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class Finished:
    """How a workload process ended and the tails of what it printed."""

    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


def _drain(stream: Any, tail: bytearray, limit: int) -> None:
    # Keep reading to EOF (a full pipe would stall the workload) but keep only the tail.
    while True:
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            return
        tail += chunk
        del tail[:-limit]


def workload_environment() -> dict[str, str]:
    """The agent's environment without its own settings (the token among them)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("NODEWARDEN_")}


def run_bounded(argv: list[str], timeout: float, limit: int = OUTPUT_MAX_BYTES) -> Finished:
    """Run argv (no shell) to completion or ``timeout``; bounded output, whole group killed on timeout."""
    began = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=workload_environment(),
        start_new_session=True,  # its own process group: a timeout kills the children too
    )
    tails = (bytearray(), bytearray())
    readers = [
        threading.Thread(target=_drain, args=(stream, tail, limit), daemon=True)
        for stream, tail in zip((proc.stdout, proc.stderr), tails)
    ]
    for reader in readers:
        reader.start()
    try:
        returncode: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        returncode = None
    for reader in readers:
        reader.join(KILL_GRACE_S)  # a grandchild that left the group may still hold the pipe
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    text = [bytes(tail).decode(errors="replace") for tail in tails]
    return Finished(returncode, text[0], text[1], time.monotonic() - began)


def read_figures(stdout: str) -> dict[str, Any] | None:
    """The last line of stdout that is a JSON object, or None."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                document = json.loads(line)  # NaN and Infinity parse: a diverged loss must reach the verdict
            except ValueError:
                continue
            if isinstance(document, dict):
                return document
    return None


def numeric_figures(document: dict[str, Any]) -> dict[str, float]:
    """The document's numbers as figures; a non-finite loss becomes ``loss_finite`` 0 (JSON to
    the portal cannot carry NaN), and ``loss_finite`` is 1 when the loss is a real number."""
    figures: dict[str, float] = {}
    for name, value in document.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or len(name) > FIGURE_NAME_MAX:
            continue
        if name == "loss":
            figures["loss_finite"] = 1.0 if math.isfinite(value) else 0.0
        if math.isfinite(value) and len(figures) < MAX_FIGURES:
            figures[name] = float(value)
    return figures


def _summary(name: str, figures: dict[str, float]) -> str:
    parts = []
    if "samples_per_s" in figures:
        parts.append(f"{figures['samples_per_s']:,.1f} samples/s")
    if figures.get("loss_finite") == 0.0:
        parts.append("loss is not finite")
    elif "loss" in figures:
        parts.append(f"loss {figures['loss']:.4g}")
    if "seconds" in figures:
        parts.append(f"{figures['seconds']:.1f} s")
    return f"workload {name}: " + (", ".join(parts) or f"{len(figures)} figures")


def run(params: dict[str, Any], env: CheckEnv) -> dict[str, Any]:
    name = param(params, "workload", str, "tiny-train")
    workload = env.workloads.get(name)
    if workload is None:
        # Refused, not run: only the node's config says what a workload name means.
        return outcome(
            "error",
            f"workload {name!r} is not in this agent's config (configured: {', '.join(sorted(env.workloads))})",
        )
    try:
        done = run_bounded(list(workload.argv), workload.timeout_s)
    except OSError as exc:
        return outcome("error", f"workload {name}: cannot start {workload.argv[0]}: {exc}")
    output = done.stdout + (("\n" + done.stderr) if done.stderr else "")
    if done.returncode is None:
        return outcome(
            "failed",
            f"workload {name} did not finish within {workload.timeout_s:g} s",
            {"seconds": round(done.seconds, 3), "timed_out": 1.0},
            output,
        )
    if done.returncode != 0:
        return outcome(
            "failed", f"workload {name} exited {done.returncode}", {"exit_code": float(done.returncode)}, output
        )
    document = read_figures(done.stdout)
    if document is None:
        return outcome("error", f"workload {name} printed no JSON line of figures on stdout", output=output)
    if isinstance(document.get("not_available"), str):
        return outcome("not_available", f"workload {name}: {document['not_available']}", output=output)
    figures = numeric_figures(document)
    return outcome("passed", _summary(name, figures), figures, output)
