"""GPU stress: a matrix multiply loop on every GPU at once, reporting TFLOP/s and errors.

Each GPU multiplies the same two seeded matrices over and over and compares every
product with the first one. cuBLAS gives bit-identical results for the same inputs on
the same GPU and stream (cuBLAS docs, "Results reproducibility"), so any difference
is a silent data corruption, counted in ``errors``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from . import CheckEnv, outcome, param
from .backends import load_backend


def stress_gpu(
    backend: Any, device: int, n: int, dtype: str, seconds: float, clock: Callable[[], float] = time.monotonic
) -> dict[str, float]:
    """Multiply for ``seconds`` on one GPU: iterations, elapsed seconds, TFLOP/s, errors."""
    a, b = backend.operands(device, n, dtype)
    reference = backend.matmul(a, b)
    backend.synchronize(device)
    iterations = errors = 0
    start = clock()
    while iterations == 0 or clock() - start < seconds:
        if not backend.same(backend.matmul(a, b), reference):
            errors += 1
        iterations += 1
    backend.synchronize(device)
    elapsed = max(clock() - start, 1e-9)
    return {
        "iterations": iterations,
        "seconds": elapsed,
        "errors": errors,
        "tflops": 2.0 * n**3 * iterations / elapsed / 1e12,
    }


def _run_all(backend: Any, devices: list[int], n: int, dtype: str, seconds: float) -> dict[int, Any]:
    results: dict[int, Any] = {}

    def work(device: int) -> None:
        try:
            results[device] = stress_gpu(backend, device, n, dtype, seconds)
        except Exception as exc:  # a CUDA error on one GPU is that GPU's result
            results[device] = exc

    threads = [threading.Thread(target=work, args=(d,), name=f"stress-gpu{d}") for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def summarise(results: dict[int, Any], dtype: str, min_tflops: float = 0.0) -> dict[str, Any]:
    """The check result from per-GPU stress figures (or exceptions)."""
    figures: dict[str, float] = {}
    broken = {d: r for d, r in results.items() if isinstance(r, Exception)}
    good = {d: r for d, r in results.items() if not isinstance(r, Exception)}
    for device, figure in sorted(good.items()):
        figures[f"gpu{device}_tflops"] = round(figure["tflops"], 3)
    figures["errors"] = float(sum(r["errors"] for r in good.values()))
    if good:
        figures["min_tflops"] = min(figures[f"gpu{d}_tflops"] for d in good)
    problems = [f"GPU {d}: {type(e).__name__}: {e}" for d, e in sorted(broken.items())]
    if figures["errors"]:
        problems.append(f"{int(figures['errors'])} products differed from the reference (silent data corruption)")
    slow = [d for d in good if figures[f"gpu{d}_tflops"] < min_tflops]
    if slow:
        problems.append(f"GPU {', '.join(map(str, sorted(slow)))} below {min_tflops} TFLOP/s")
    head = f"{dtype} GEMM on {len(results)} GPUs"
    if problems:
        return outcome("failed", f"{head}: " + "; ".join(problems), figures)
    return outcome("passed", f"{head}: min {figures['min_tflops']:.1f} TFLOP/s, no errors", figures)


def run(params: dict[str, Any], env: CheckEnv) -> dict[str, Any]:
    seconds = param(params, "seconds", int, 60, 1, 3600)
    n = param(params, "matrix_size", int, 8192, 64, 65536)
    dtype = param(params, "dtype", str, "bf16")
    min_tflops = param(params, "min_tflops", float, 0.0, 0.0)
    if dtype not in ("bf16", "fp16", "fp32"):
        return outcome("error", f"bad params: dtype must be bf16, fp16 or fp32, got {dtype!r}")
    backend, why = load_backend(env.importer)
    if backend is None:
        return outcome("not_available", f"GPU stress needs PyTorch or CuPy with a CUDA GPU: {why}")
    devices = list(range(backend.device_count()))
    return summarise(_run_all(backend, devices, n, dtype, seconds), dtype, min_tflops)
