"""NCCL bandwidth: nccl-tests' ``all_reduce_perf -b <min> -e <max> -f 2 -g <gpus>``.

The verdict lines come from nccl-tests' common.cu: "# Out of bounds values : 0 OK"
and "# Avg bus bandwidth    : 448.212" (GB/s). Rows are
``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``
(out-of-place then in-place; releases before 2.10 have no root column); under mpirun
every line carries a "[1,0]<stdout>:" prefix.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from . import CheckEnv, outcome, param

_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
TIMEOUT_S = 1800


def _row(fields: list[str]) -> dict[str, float] | None:
    if len(fields) not in (12, 13) or not fields[0].isdigit():
        return None
    offset = 1 if len(fields) == 13 else 0  # the "root" column (nccl-tests >= 2.10)
    try:
        busbw = max(float(fields[6 + offset]), float(fields[10 + offset]))
    except ValueError:
        return None
    wrong = sum(int(fields[i]) for i in (7 + offset, 11 + offset) if fields[i].isdigit())  # "N/A" with -c 0
    return {"size": float(fields[0]), "busbw": busbw, "wrong": float(wrong)}


def parse_all_reduce(text: str) -> dict[str, float]:
    """Figures from all_reduce_perf output: busbw_gbps, max_busbw_gbps, wrong, out_of_bounds."""
    figures: dict[str, float] = {}
    rows = []
    for line in text.splitlines():
        line = _PREFIX.sub("", line).strip()
        avg, oob = _AVG.search(line), _OOB.search(line)
        if avg:
            figures["busbw_gbps"] = float(avg.group(1))
        elif oob:
            figures["out_of_bounds"] = float(oob.group(1))
        elif not line.startswith("#"):
            row = _row(line.split())
            if row:
                rows.append(row)
    if rows:
        figures["max_busbw_gbps"] = max(r["busbw"] for r in rows)
        figures["wrong"] = sum(r["wrong"] for r in rows)
        figures["sizes_tested"] = float(len(rows))
    return figures


def _binary(env: CheckEnv) -> str | None:
    folder = env.extra.get("nccl_tests_dir") or os.environ.get("NODEWARDEN_NCCL_TESTS_DIR")
    if folder and os.access(os.path.join(folder, "all_reduce_perf"), os.X_OK):
        return os.path.join(folder, "all_reduce_perf")
    return env.which("all_reduce_perf")


def run(params: dict[str, Any], env: CheckEnv) -> dict[str, Any]:
    min_bytes = param(params, "min_bytes", int, 8, 1)
    max_bytes = param(params, "max_bytes", int, 1 << 30, min_bytes)
    gpus = param(params, "gpus", int, 8, 1, 64)
    binary = _binary(env)
    if not binary:
        return outcome("not_available", "all_reduce_perf (nccl-tests) is not installed on this node")
    argv = [binary, "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", "-g", str(gpus)]
    try:
        done = env.runner(argv, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return outcome("error", f"all_reduce_perf did not finish within {TIMEOUT_S} s")
    output = done.stdout + (("\n" + done.stderr) if done.stderr else "")
    figures = parse_all_reduce(done.stdout)
    if "busbw_gbps" not in figures:
        return outcome(
            "error", f"all_reduce_perf exited {done.returncode} without an 'Avg bus bandwidth' line", figures, output
        )
    # "Out of bounds values" is nccl-tests' total of the per-row #wrong counts: not added twice.
    bad = max(figures.get("out_of_bounds", 0), figures.get("wrong", 0))
    summary = f"all_reduce_perf on {gpus} GPUs: avg bus bandwidth {figures['busbw_gbps']:.1f} GB/s"
    if bad or done.returncode != 0:
        return outcome("failed", f"{summary}, {int(bad)} wrong results, exit {done.returncode}", figures, output)
    return outcome("passed", summary, figures, output)
