"""The GPU array libraries the stress and memory checks run on: PyTorch, else CuPy.

Both checks are written against the small set of operations below, so the loop logic
(timing, verification, figures) is the same whichever library a node has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

CHUNK_BYTES = 256 * 1024 * 1024  # compare in 256 MiB slices: a full-size mask would need as much memory again


class TorchBackend:
    name = "torch"
    dtypes: ClassVar[dict[str, str | None]] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

    def __init__(self, torch: Any):
        self.t = torch

    def device_count(self) -> int:
        return self.t.cuda.device_count() if self.t.cuda.is_available() else 0

    def operands(self, device: int, n: int, dtype: str) -> tuple[Any, Any]:
        generator = self.t.Generator(device=f"cuda:{device}").manual_seed(1234 + device)
        kind = getattr(self.t, self.dtypes[dtype])

        def make():
            return self.t.randn(n, n, device=f"cuda:{device}", dtype=kind, generator=generator)

        return make(), make()

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def same(self, x: Any, y: Any) -> bool:
        return bool(self.t.equal(x, y))

    def synchronize(self, device: int) -> None:
        self.t.cuda.synchronize(device)

    def free_bytes(self, device: int) -> int:
        return int(self.t.cuda.mem_get_info(device)[0])

    def alloc(self, device: int, nbytes: int) -> Any:
        return self.t.empty(nbytes, dtype=self.t.uint8, device=f"cuda:{device}")

    def fill(self, buf: Any, start: int, end: int, byte: int) -> None:
        buf[start:end].fill_(byte)

    def count_ne(self, buf: Any, start: int, end: int, byte: int) -> int:
        return int((buf[start:end] != byte).sum())

    def fill_index(self, buf: Any, start: int, end: int) -> None:
        words = buf[start:end].view(self.t.int64)
        words.copy_(self.t.arange(start // 8, end // 8, device=buf.device, dtype=self.t.int64))

    def count_index_ne(self, buf: Any, start: int, end: int) -> int:
        words = buf[start:end].view(self.t.int64)
        return int((words != self.t.arange(start // 8, end // 8, device=buf.device, dtype=self.t.int64)).sum())


class CupyBackend(TorchBackend):
    name = "cupy"
    dtypes: ClassVar[dict[str, str | None]] = {
        "bf16": None,
        "fp16": "float16",
        "fp32": "float32",
    }  # CuPy has no bfloat16

    def __init__(self, cupy: Any):
        self.cp = cupy

    def device_count(self) -> int:
        return int(self.cp.cuda.runtime.getDeviceCount())

    def operands(self, device: int, n: int, dtype: str) -> tuple[Any, Any]:
        if self.dtypes[dtype] is None:
            raise ValueError("CuPy cannot multiply bf16 matrices; ask for fp16 or fp32")
        with self.cp.cuda.Device(device):
            rng = self.cp.random.default_rng(1234 + device)
            return (
                rng.standard_normal((n, n), dtype="float32").astype(self.dtypes[dtype]),
                rng.standard_normal((n, n), dtype="float32").astype(self.dtypes[dtype]),
            )

    def matmul(self, a: Any, b: Any) -> Any:
        with a.device:
            return a @ b

    def same(self, x: Any, y: Any) -> bool:
        with x.device:
            return bool(self.cp.array_equal(x, y))

    def synchronize(self, device: int) -> None:
        with self.cp.cuda.Device(device):
            self.cp.cuda.Device(device).synchronize()

    def free_bytes(self, device: int) -> int:
        return int(self.cp.cuda.Device(device).mem_info[0])

    def alloc(self, device: int, nbytes: int) -> Any:
        with self.cp.cuda.Device(device):
            return self.cp.empty(nbytes, dtype=self.cp.uint8)

    def fill(self, buf: Any, start: int, end: int, byte: int) -> None:
        with buf.device:
            buf[start:end].fill(byte)

    def count_ne(self, buf: Any, start: int, end: int, byte: int) -> int:
        with buf.device:
            return int(self.cp.count_nonzero(buf[start:end] != byte))

    def fill_index(self, buf: Any, start: int, end: int) -> None:
        with buf.device:
            buf[start:end].view(self.cp.int64)[:] = self.cp.arange(start // 8, end // 8, dtype=self.cp.int64)

    def count_index_ne(self, buf: Any, start: int, end: int) -> int:
        with buf.device:
            expected = self.cp.arange(start // 8, end // 8, dtype=self.cp.int64)
            return int(self.cp.count_nonzero(buf[start:end].view(self.cp.int64) != expected))


def load_backend(importer: Callable[[str], Any]) -> tuple[Any | None, str]:
    """(backend, "") for the first library that imports and sees a GPU, else (None, why)."""
    reasons = []
    for module, wrap in (("torch", TorchBackend), ("cupy", CupyBackend)):
        try:
            backend = wrap(importer(module))
        except ImportError:
            reasons.append(f"{module} is not installed")
            continue
        try:
            if backend.device_count() > 0:
                return backend, ""
            reasons.append(f"{module} sees no CUDA GPU")
        except Exception as exc:  # a broken CUDA runtime reads as "not available here"
            reasons.append(f"{module} cannot use CUDA: {exc}")
    return None, "; ".join(reasons)
