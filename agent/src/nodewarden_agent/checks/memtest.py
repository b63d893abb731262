"""GPU memory test: allocate a fraction of each GPU's free memory, write patterns, verify.

Patterns: all zeros, all ones, 0xAA and 0x55 (every bit flips both ways between them),
then each 8-byte word's own index, which catches addressing faults a constant cannot.
"""

from __future__ import annotations

from typing import Any

from . import CheckEnv, outcome, param
from .backends import CHUNK_BYTES, load_backend

PATTERNS = (0x00, 0xFF, 0xAA, 0x55)


def _slices(nbytes: int, chunk: int):
    for start in range(0, nbytes, chunk):
        yield start, min(start + chunk, nbytes)


def verify_device_memory(backend: Any, device: int, nbytes: int, chunk: int = CHUNK_BYTES) -> dict[str, int]:
    """Bytes tested and mismatching bytes (words for the index pattern) on one GPU."""
    nbytes -= nbytes % 8
    buf = backend.alloc(device, nbytes)
    mismatches = 0
    try:
        for byte in PATTERNS:
            for start, end in _slices(nbytes, chunk):
                backend.fill(buf, start, end, byte)
            backend.synchronize(device)
            mismatches += sum(backend.count_ne(buf, s, e, byte) for s, e in _slices(nbytes, chunk))
        for start, end in _slices(nbytes, chunk):
            backend.fill_index(buf, start, end)
        backend.synchronize(device)
        mismatches += sum(backend.count_index_ne(buf, s, e) for s, e in _slices(nbytes, chunk))
    finally:
        del buf
    return {"bytes_tested": nbytes, "mismatches": mismatches}


def run(params: dict[str, Any], env: CheckEnv) -> dict[str, Any]:
    fraction = param(params, "fraction", float, 0.9, 0.01, 0.95)
    backend, why = load_backend(env.importer)
    if backend is None:
        return outcome("not_available", f"GPU memory test needs PyTorch or CuPy with a CUDA GPU: {why}")
    figures: dict[str, float] = {"bytes_tested": 0.0, "mismatches": 0.0}
    bad = []
    for device in range(backend.device_count()):
        result = verify_device_memory(backend, device, int(backend.free_bytes(device) * fraction))
        figures[f"gpu{device}_mismatches"] = float(result["mismatches"])
        figures["bytes_tested"] += result["bytes_tested"]
        figures["mismatches"] += result["mismatches"]
        if result["mismatches"]:
            bad.append(device)
    gib = figures["bytes_tested"] / 2**30
    if bad:
        return outcome(
            "failed",
            f"memory mismatches on GPU {', '.join(map(str, bad))} ({int(figures['mismatches'])} in {gib:.1f} GiB)",
            figures,
        )
    return outcome("passed", f"{gib:.1f} GiB tested on {backend.device_count()} GPUs, no mismatches", figures)
