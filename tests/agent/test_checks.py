"""Active checks: clear "not_available" without tools, and the parsers on captured output."""

from __future__ import annotations

import subprocess

import pytest

from nodewarden_agent.checks import CheckEnv, run_check
from nodewarden_agent.checks.dcgm import parse_diag_json
from nodewarden_agent.checks.memtest import verify_device_memory
from nodewarden_agent.checks.nccl import parse_all_reduce
from nodewarden_agent.checks.stress import stress_gpu, summarise

from .conftest import FIXTURES


def _no_tools():
    def importer(name):
        raise ImportError(f"No module named {name!r}")

    return CheckEnv(which=lambda name: None, importer=importer)


@pytest.mark.parametrize(
    ("kind", "params", "needs"),
    [
        ("gpu_stress", {"seconds": 5, "matrix_size": 4096, "dtype": "bf16"}, "PyTorch or CuPy"),
        ("memory_test", {"fraction": 0.5}, "PyTorch or CuPy"),
        ("dcgm_diag", {"level": 2}, "dcgmi is not installed"),
        (
            "nccl_test",
            {"min_bytes": 8, "max_bytes": 1 << 30, "gpus": 8},
            "all_reduce_perf (nccl-tests) is not installed",
        ),
    ],
)
def test_it_answers_not_available_when_the_tool_is_missing(kind, params, needs):
    result = run_check(kind, params, _no_tools())
    assert result["status"] == "not_available" and needs in result["summary"]
    assert result["started_at"].endswith("+00:00") and result["finished_at"] >= result["started_at"]


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("dcgm_diag", {"level": 7}, "level must be between 1 and 4"),
        ("gpu_stress", {"seconds": "long"}, "seconds must be int"),
        ("gpu_stress", {"dtype": "fp8"}, "dtype must be bf16, fp16 or fp32"),
        ("memory_test", {"fraction": 2}, "fraction must be between"),
        ("burn_in", {}, "unknown check kind 'burn_in'"),
    ],
)
def test_it_refuses_bad_params_with_a_clear_error(kind, params, message):
    result = run_check(kind, params, _no_tools())
    assert result["status"] == "error" and message in result["summary"]


def test_it_counts_a_passing_level_one_dcgm_diag():
    counts, failed, _ = parse_diag_json((FIXTURES / "dcgm" / "diag-r1-pass-dcgm3.txt").read_text())
    assert counts == {"passed": 17, "failed": 0, "skipped": 0, "warned": 0} and failed == []


def _runner(stdout, code=0):
    def run(argv, timeout):
        return subprocess.CompletedProcess(argv, code, stdout, "")

    return run


def test_it_names_the_failed_dcgm_tests_and_gpus():
    text = (FIXTURES / "dcgm" / "diag-r3-fail-per-gpu.json").read_text()
    env = CheckEnv(runner=_runner(text, code=226), which=lambda name: "/usr/bin/dcgmi")
    result = run_check("dcgm_diag", {"level": 3}, env)
    assert result["status"] == "failed"
    assert result["summary"].startswith("DCGM diag level 3: 1 failed: sm_stress (GPU 0) - Max stress level of 2128.7")
    assert result["figures"] == {
        "tests_passed": 5.0,
        "tests_failed": 1.0,
        "tests_skipped": 2.0,
        "tests_warned": 0.0,
        "level": 3.0,
    }


def test_it_passes_a_clean_dcgm_run_and_reports_unreadable_output_as_error():
    text = (FIXTURES / "dcgm" / "diag-r1-pass-dcgm3.txt").read_text()
    ok = run_check("dcgm_diag", {"level": 1}, CheckEnv(runner=_runner(text), which=lambda n: n))
    assert ok["status"] == "passed" and ok["summary"] == "DCGM diag level 1: 17 passed, 0 skipped"
    broken = run_check(
        "dcgm_diag", {}, CheckEnv(runner=_runner("Error: unable to connect to host engine", 255), which=lambda n: n)
    )
    assert broken["status"] == "error" and "Error: unable to connect" in broken["output"]


def test_it_reads_all_reduce_bus_bandwidth_from_an_h100_run():
    figures = parse_all_reduce((FIXTURES / "nccl" / "all_reduce_h100x8.txt").read_text())
    assert figures == {
        "busbw_gbps": 448.212,
        "out_of_bounds": 0.0,
        "max_busbw_gbps": 470.73,
        "wrong": 0.0,
        "sizes_tested": 4.0,
    }


def test_it_reads_all_reduce_output_under_mpirun_prefixes():
    figures = parse_all_reduce((FIXTURES / "nccl" / "all_reduce_mpirun_efa.txt").read_text())
    assert figures["busbw_gbps"] == 1.15327 and figures["sizes_tested"] == 5.0 and figures["max_busbw_gbps"] == 3.15


def test_it_fails_an_nccl_run_with_wrong_results():
    text = (FIXTURES / "nccl" / "all_reduce_wrong.txt").read_text()
    env = CheckEnv(runner=_runner(text, code=1), which=lambda n: "/opt/nccl-tests/build/all_reduce_perf")
    result = run_check("nccl_test", {"min_bytes": 268435456, "max_bytes": 2147483648, "gpus": 8}, env)
    assert result["status"] == "failed" and "3 wrong results" in result["summary"]
    assert result["figures"]["busbw_gbps"] == 448.212


class ListBackend:
    """A CPU stand-in for a GPU array library: no GPU, PyTorch or CuPy can run here.

    It implements the same primitive operations over Python lists and a bytearray, so
    the checks' loop logic (verification, counting, figures) runs for real; ``flip``
    corrupts results the way a faulty GPU would."""

    def __init__(self, flip_every=0, stuck_byte=None):
        self.flip_every, self.stuck_byte, self.calls = flip_every, stuck_byte, 0

    def operands(self, device, n, dtype):
        return [[float(i + j) for j in range(n)] for i in range(n)], [
            [float(i == j) for j in range(n)] for i in range(n)
        ]

    def matmul(self, a, b):
        self.calls += 1
        product = [[sum(x * y for x, y in zip(row, col, strict=True)) for col in zip(*b, strict=True)] for row in a]
        if self.flip_every and self.calls % self.flip_every == 0:
            product[0][0] += 1.0
        return product

    def same(self, x, y):
        return x == y

    def synchronize(self, device):
        pass

    def alloc(self, device, nbytes):
        return bytearray(nbytes)

    def fill(self, buf, start, end, byte):
        buf[start:end] = bytes([byte]) * (end - start)
        if self.stuck_byte is not None and start <= self.stuck_byte < end:
            buf[self.stuck_byte] = 0x00  # a cell stuck at zero

    def count_ne(self, buf, start, end, byte):
        return sum(1 for value in buf[start:end] if value != byte)

    def fill_index(self, buf, start, end):
        for word in range(start // 8, end // 8):
            buf[word * 8 : word * 8 + 8] = word.to_bytes(8, "little")

    def count_index_ne(self, buf, start, end):
        return sum(
            1 for word in range(start // 8, end // 8) if buf[word * 8 : word * 8 + 8] != word.to_bytes(8, "little")
        )


def _ticks(step):
    now = [0.0]

    def clock():
        now[0] += step
        return now[0]

    return clock


def test_stress_counts_products_that_differ_from_the_reference():
    clean = stress_gpu(ListBackend(), 0, 4, "fp32", seconds=1.0, clock=_ticks(0.1))
    assert clean["errors"] == 0 and clean["iterations"] >= 5
    assert clean["tflops"] == pytest.approx(2 * 4**3 * clean["iterations"] / clean["seconds"] / 1e12)
    faulty = stress_gpu(ListBackend(flip_every=3), 0, 4, "fp32", seconds=1.0, clock=_ticks(0.1))
    assert faulty["errors"] > 0


def test_stress_summary_fails_on_errors_slow_or_crashed_gpus():
    good = {"iterations": 10, "seconds": 1.0, "errors": 0, "tflops": 700.0}
    passed = summarise({0: good, 1: dict(good, tflops=690.0)}, "bf16")
    assert passed["status"] == "passed" and passed["figures"] == {
        "gpu0_tflops": 700.0,
        "gpu1_tflops": 690.0,
        "errors": 0.0,
        "min_tflops": 690.0,
    }
    failed = summarise(
        {0: dict(good, errors=2), 1: RuntimeError("CUDA error: an illegal memory access")}, "bf16", min_tflops=800.0
    )
    assert failed["status"] == "failed"
    assert "GPU 1: RuntimeError" in failed["summary"] and "2 products differed" in failed["summary"]
    assert "GPU 0 below 800.0 TFLOP/s" in failed["summary"]


def test_memory_test_finds_a_stuck_cell_and_passes_good_memory():
    assert verify_device_memory(ListBackend(), 0, 4096, chunk=1024) == {"bytes_tested": 4096, "mismatches": 0}
    bad = verify_device_memory(ListBackend(stuck_byte=1500), 0, 4096, chunk=1024)
    assert bad["mismatches"] == 3  # 0xFF, 0xAA, 0x55 read back wrong; index pattern written after
