"""Per-kind parameters of active checks: defaults, limits, refusals, timeouts and figure headlines."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from checks.specs import describe_figures, normalise_params, run_timeout
from tests.factories import HardwareProfileFactory, NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    return NodeFactory(hardware_profile=HardwareProfileFactory(name="HGX 4-GPU", gpu_count=4))


def errors_of(kind, params, node) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        normalise_params(kind, params, node)
    return caught.value.message_dict.get("params") or caught.value.message_dict["kind"]


def test_it_fills_in_every_default(node):
    assert normalise_params("gpu_stress", {}, node) == {
        "seconds": 60,
        "matrix_size": 8192,
        "dtype": "bf16",
        "min_tflops": 0.0,
    }
    assert normalise_params("dcgm_diag", None, node) == {"level": 2}
    assert normalise_params("memory_test", {}, node) == {"fraction": 0.9}


def test_it_takes_the_nccl_gpu_count_from_the_hardware_profile(node):
    assert normalise_params("nccl_test", {}, node) == {"min_bytes": 8, "max_bytes": 8 * 2**30, "gpus": 4}
    assert "gpus: must be a whole number from 1 to 4 (got 8)" in errors_of("nccl_test", {"gpus": 8}, node)


def test_it_keeps_valid_values(node):
    params = {"seconds": 3600, "matrix_size": 1024, "dtype": "fp32", "min_tflops": 450.0}
    assert normalise_params("gpu_stress", params, node) == params


def test_it_hands_nccl_sizes_to_the_agent_as_byte_counts(node):
    """Operators write nccl-tests' "128M"; the agent gets the number of bytes."""
    params = normalise_params("nccl_test", {"min_bytes": "1K", "max_bytes": "128M"}, node)
    assert (params["min_bytes"], params["max_bytes"]) == (1024, 128 * 2**20)
    assert normalise_params("nccl_test", {"min_bytes": 64}, node)["min_bytes"] == 64


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("gpu_stress", {"seconds": 0}, "seconds: must be a whole number from 1 to 3600 (got 0)"),
        ("gpu_stress", {"seconds": 3601}, "seconds: must be a whole number from 1 to 3600 (got 3601)"),
        ("gpu_stress", {"seconds": "60"}, "seconds: must be a whole number from 1 to 3600 (got '60')"),
        ("gpu_stress", {"seconds": True}, "seconds: must be a whole number from 1 to 3600 (got True)"),
        ("gpu_stress", {"matrix_size": 512}, "matrix_size: must be a whole number from 1024 to 32768 (got 512)"),
        ("gpu_stress", {"dtype": "fp8"}, "dtype: must be one of bf16, fp16, fp32 (got 'fp8')"),
        ("dcgm_diag", {"level": 5}, "level: must be a whole number from 1 to 4 (got 5)"),
        ("memory_test", {"fraction": 0.99}, "fraction: must be a number from 0.1 to 0.95 (got 0.99)"),
        ("nccl_test", {"max_bytes": "8T"}, 'max_bytes: must be a byte count such as 8, "128M" or "8G" (got \'8T\')'),
        ("nccl_test", {"min_bytes": 0}, "min_bytes: must be a byte count"),
        ("gpu_stress", {"min_tflops": -1}, "min_tflops: must be a number from 0 to 10000 (got -1)"),
        ("nccl_test", {"min_bytes": "1G", "max_bytes": "8M"}, "min_bytes: must not be larger than max_bytes"),
    ],
)
def test_it_refuses_values_out_of_range_with_a_message_naming_the_parameter(node, kind, params, message):
    assert any(error.startswith(message) for error in errors_of(kind, params, node))


def test_it_refuses_unknown_parameters_instead_of_ignoring_them(node):
    (message,) = errors_of("dcgm_diag", {"levle": 3}, node)
    assert message == "levle: unknown parameter for dcgm_diag (known: level)"


def test_it_names_every_bad_parameter_at_once(node):
    assert len(errors_of("gpu_stress", {"seconds": -1, "dtype": "int8", "extra": 1}, node)) == 3


def test_it_refuses_params_that_are_not_an_object_and_unknown_kinds(node):
    assert errors_of("gpu_stress", [60], node) == ["Must be a JSON object."]
    assert "Unknown check kind 'burn'" in errors_of("burn", {}, node)[0]
    assert "Unknown check kind" in errors_of("transition_followup", {}, node)[0]


def test_the_deadline_grows_with_the_work_asked_for():
    assert run_timeout("gpu_stress", {"seconds": 600}) == timedelta(minutes=15)
    assert run_timeout("dcgm_diag", {"level": 1}) < run_timeout("dcgm_diag", {"level": 4})


@pytest.mark.parametrize(
    ("kind", "figures", "text"),
    [
        # The figures as the node agent sends them (agent/src/nodewarden_agent/checks/).
        (
            "gpu_stress",
            {f"gpu{i}_tflops": 612.0 + i for i in range(8)} | {"min_tflops": 612.0, "errors": 0.0},
            "min 612 TFLOP/s over 8 GPUs",
        ),
        (
            "gpu_stress",
            {"gpu0_tflops": 401.25, "min_tflops": 401.25, "errors": 3.0},
            "min 401.2 TFLOP/s over 1 GPU, 3 errors",
        ),
        ("nccl_test", {"busbw_gbps": 362.0, "max_busbw_gbps": 371.5, "wrong": 0.0}, "busbw 362 GB/s"),
        (
            "dcgm_diag",
            {"tests_passed": 11.0, "tests_failed": 1.0, "tests_skipped": 0.0, "level": 2.0},
            "1 failed, 11 passed (level 2)",
        ),
        ("memory_test", {"bytes_tested": 72 * 2.0**30, "mismatches": 0.0}, "72 GiB tested, 0 mismatches"),
        ("gpu_stress", {"tflops_max": 700}, "tflops_max 700"),  # the headline's figures missing: list what came
        ("dcgm_diag", {}, ""),
    ],
)
def test_it_reads_figures_as_an_operator_would_say_them(kind, figures, text):
    assert describe_figures(kind, figures) == text
