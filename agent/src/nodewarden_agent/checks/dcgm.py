"""DCGM diagnostics: ``dcgmi diag -r <level> -j`` and its JSON.

Two JSON shapes exist: DCGM 1.x-3.x nest tests under "DCGM GPU Diagnostic" ->
"test_categories" -> "tests" with statuses "PASS"/"FAIL"/"SKIP"/"WARN"; DCGM 4.x
lists "tests" at the top with lowercase statuses and per-entity results. The parser
walks any object that has a "name" and a "results" list, so both read the same.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

from . import CheckEnv, outcome, param

# Typical durations (DCGM docs): r1 seconds, r2 ~2 min, r3 ~15 min, r4 longer.
TIMEOUT_BY_LEVEL = {1: 300, 2: 900, 3: 3600, 4: 7200}


def _tests(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and isinstance(node.get("results"), list):
            yield node
            return
        for value in node.values():
            yield from _tests(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tests(value)


def _result_gpus(result: dict[str, Any]) -> str:
    for key in ("gpu_ids", "gpu_id", "entity_id"):
        if key in result:
            return str(result[key])
    return "?"


def _warnings(result: dict[str, Any]) -> list[str]:
    texts = []
    for item in result.get("warnings") or []:
        texts.append(item.get("warning", "") if isinstance(item, dict) else str(item))
    return [t for t in texts if t]


def parse_diag_json(text: str) -> tuple[dict[str, int], list[str], list[str]]:
    """(counts by status, failed "test (GPU ids)" names, failure messages) from dcgmi output.

    dcgmi may print a line of text before the JSON document, so parsing starts at "{"."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in dcgmi output")
    document = json.loads(text[start:])
    counts = {"passed": 0, "failed": 0, "skipped": 0, "warned": 0}
    failed, messages = [], []
    status_names = {"pass": "passed", "fail": "failed", "skip": "skipped", "warn": "warned"}
    for test in _tests(document):
        for result in test["results"]:
            if not isinstance(result, dict):
                continue
            status = status_names.get(str(result.get("status", "")).lower())
            if status:
                counts[status] += 1
            if status == "failed":
                failed.append(f"{test['name']} (GPU {_result_gpus(result)})")
                messages.extend(_warnings(result))
    return counts, failed, messages


def run(params: dict[str, Any], env: CheckEnv) -> dict[str, Any]:
    level = param(params, "level", int, 1, 1, 4)
    if not env.which("dcgmi"):
        return outcome("not_available", "dcgmi is not installed on this node (install DCGM to run diagnostics)")
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    try:
        done = env.runner(argv, timeout=TIMEOUT_BY_LEVEL[level])
    except subprocess.TimeoutExpired:
        return outcome("error", f"dcgmi diag -r {level} did not finish within {TIMEOUT_BY_LEVEL[level]} s")
    output = done.stdout + (("\n" + done.stderr) if done.stderr else "")
    try:
        counts, failed, messages = parse_diag_json(done.stdout)
    except ValueError as exc:
        return outcome(
            "error", f"dcgmi diag -r {level} exited {done.returncode} without readable JSON: {exc}", output=output
        )
    figures = {f"tests_{key}": float(value) for key, value in counts.items()}
    figures["level"] = float(level)
    if failed:
        detail = "; ".join(messages[:3])
        return outcome(
            "failed",
            f"DCGM diag level {level}: {counts['failed']} failed: {', '.join(failed)}"
            + (f" - {detail}" if detail else ""),
            figures,
            output,
        )
    if not sum(counts.values()):
        return outcome("error", f"dcgmi diag -r {level} reported no test results", figures, output)
    return outcome(
        "passed", f"DCGM diag level {level}: {counts['passed']} passed, {counts['skipped']} skipped", figures, output
    )
