"""Run infiniband-diags against the fabric and keep what they printed.

One look at the fabric costs one fabric sweep: ``ibnetdiscover --cache`` scans it (SMPs
to every node), then ``iblinkinfo`` and ``ibqueryerrors`` read that cache instead of
scanning again (``--load-cache``). The three outputs therefore describe the same moment,
and ``merge`` never meets a cable that moved between two scans.

Counters come from one ``ibqueryerrors`` pass (a PMA query per port, in the tool, not a
process per port): every error counter above zero, for every port. Per-port ``perfquery``
would start 20,000 processes on a large fabric. The threshold file is an empty one of
ours, so a site's /etc/infiniband-diags/error_thresholds cannot hide counters: what
counts as too many is fabric.validation's call. ibqueryerrors needs the SA (a running
SM) for its path records, as on any real fabric.

Under ibsim every tool must be LD_PRELOADed with libumad2sim (``sim_preload``); see
sandbox.emulators.fabric, which also keeps killed tools from holding ibsim's 10 client slots.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from .ibdiags import (
    IbTopology,
    PortCounters,
    merge,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    resolve_counters,
)

STDERR_TAIL = 2000
# ibqueryerrors exits 1 when it found errors beyond the thresholds: that is a result.
OK_RETURNCODES = {"ibnetdiscover": (0,), "iblinkinfo": (0,), "ibqueryerrors": (0, 1)}


class ToolResult(NamedTuple):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class Runner(Protocol):
    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ToolResult: ...


class CollectorError(RuntimeError):
    """A tool failed: names it, its exit code (or timeout) and the tail of its stderr."""

    def __init__(self, tool: str, message: str, stderr: str = "") -> None:
        self.tool, self.stderr = tool, stderr
        tail = f"; stderr: {stderr[-STDERR_TAIL:].strip()}" if stderr.strip() else ""
        super().__init__(f"{tool}: {message}{tail}")


def quiet_stderr(text: str) -> str:
    """stderr without ibsim's per-tool "ibwarn: [...] sim_connect: attached as client N" line."""
    return "".join(line for line in text.splitlines(keepends=True) if "sim_connect: attached" not in line)


def subprocess_runner(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> ToolResult:
    """Run one tool, killing it after ``timeout`` seconds (then CollectorError)."""
    tool = os.path.basename(argv[0])
    started = time.monotonic()
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            check=False,
        )
    except FileNotFoundError:
        raise CollectorError(tool, "not installed (Debian: apt-get install infiniband-diags)") from None
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise CollectorError(tool, f"timed out after {timeout:g} s", quiet_stderr(stderr)) from None
    return ToolResult(tuple(argv), done.returncode, done.stdout, quiet_stderr(done.stderr), time.monotonic() - started)


@dataclass
class CollectedOutputs:
    """What the tools printed (kept as evidence: uploadable, re-parseable) and how they ran."""

    ibnetdiscover: str
    iblinkinfo: str
    ibqueryerrors: str
    runs: list[ToolResult] = field(default_factory=list)  # argv, exit code, stderr, seconds (stdout too)

    def texts(self) -> dict[str, str]:
        """Tool name -> its output, as stored with a discovery run."""
        return {"ibnetdiscover": self.ibnetdiscover, "iblinkinfo": self.iblinkinfo, "ibqueryerrors": self.ibqueryerrors}

    def parse(self) -> tuple[IbTopology, list[PortCounters]]:
        """The merged topology, and the counters keyed by node GUID (IbParseError /
        IbMergeError on output that cannot be read in full)."""
        topology = merge(parse_ibnetdiscover(self.ibnetdiscover), parse_iblinkinfo(self.iblinkinfo))
        return topology, resolve_counters(parse_ibqueryerrors(self.ibqueryerrors), topology)


def collect(
    *,
    runner: Runner = subprocess_runner,
    timeout: float = 60,
    sim_preload: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    extra_args: Sequence[str] = (),
) -> CollectedOutputs:
    """Sweep the fabric once and read its port states and error counters (module docstring).

    ``timeout`` applies to each tool; ``env`` is added to this process's environment;
    ``sim_preload`` (libumad2sim.so) points the tools at ibsim; ``extra_args`` go to every
    tool (e.g. ``["-C", "mlx5_0", "-P", "1"]`` to pick the local port)."""
    full_env = {**os.environ, **(env or {})}
    if sim_preload:
        full_env["LD_PRELOAD"] = sim_preload
    with tempfile.TemporaryDirectory(prefix="nodewarden-ibdiags-") as tmp:
        cache = os.path.join(tmp, "fabric.cache")
        thresholds = os.path.join(tmp, "error_thresholds")
        with open(thresholds, "w") as f:
            f.write("# empty: report every error counter above zero\n")
        steps: list[tuple[str, list[str]]] = [
            ("ibnetdiscover", ["ibnetdiscover", *extra_args, "--cache", cache]),
            ("iblinkinfo", ["iblinkinfo", *extra_args, "--load-cache", cache]),
            ("ibqueryerrors", ["ibqueryerrors", *extra_args, "--load-cache", cache, "--threshold-file", thresholds]),
        ]
        runs = [_run(runner, tool, argv, timeout, full_env, cwd or tmp) for tool, argv in steps]
    return CollectedOutputs(runs[0].stdout, runs[1].stdout, runs[2].stdout, runs)


def _run(runner: Runner, tool: str, argv: list[str], timeout: float, env: Mapping[str, str], cwd: str) -> ToolResult:
    result = runner(argv, timeout=timeout, env=env, cwd=cwd)
    if result.returncode not in OK_RETURNCODES[tool]:
        raise CollectorError(tool, f"exit code {result.returncode}", result.stderr)
    if not result.stdout.strip():
        raise CollectorError(tool, "printed nothing", result.stderr)
    return result
