"""The NVML collector on an H100's answers: every field, NotSupported, a lost GPU."""

from __future__ import annotations

import pynvml
import pytest

from nodewarden_agent.collectors import CollectorError
from nodewarden_agent.collectors.nvml import NvmlCollector

from .fakes import FakeNvml


@pytest.fixture
def collected():
    nvml = FakeNvml()
    return NvmlCollector(nvml, expected_gpus=8).collect(), nvml


def test_it_reads_driver_cuda_and_nvml_versions(collected):
    contribution, _ = collected
    assert contribution.fields["driver_version"] == "550.90.07"
    assert contribution.fields["cuda_version"] == "12.4"
    assert contribution.fields["nvml_version"] == "12.550.90.07"


def test_it_reads_an_h100s_health_in_the_reports_units(collected):
    gpu = collected[0].fields["gpus"][0]
    assert gpu == {
        "index": 0,
        "uuid": "GPU-22dbdd79-f55a-92a8-aa39-322198e72ed6",
        "pci_bus_id": "00000000:1B:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "serial": "1653923004857",
        "vbios_version": "96.00.99.00.01",
        "persistence_mode": True,
        "temperature_c": 25,
        "hbm_temperature_c": 33,
        "max_operating_temp_c": 87,
        "hbm_max_operating_temp_c": 95,
        "slowdown_temp_c": 89,
        "shutdown_temp_c": 92,
        "power_w": 69.123,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "clock_event_reasons": 1,
        "utilization_pct": 0.0,
        "compute_processes": 0,
        "memory_used_mib": 1,
        "memory_total_mib": 81559,
        "ecc_volatile_corrected": 0,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "nvlink_links_total": 18,
        "nvlink_links_up": 18,
        "nvlink_crc_errors": 0,
        "nvlink_replay_errors": 0,
        "nvlink_recovery_errors": 0,
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "pcie_max_link_gen": 5,
        "pcie_max_link_width": 16,
        "pcie_replay_count": 0,
    }


def test_it_leaves_out_what_the_gpu_does_not_support_without_a_note(collected):
    contribution, _ = collected
    gpu = contribution.fields["gpus"][0]
    # H100 has row remapping instead of page retirement; the recovery action needs R570.
    for absent in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending", "recovery_action"):
        assert absent not in gpu
    assert not [key for key in contribution.notes if key.startswith("nvml.gpu0")]


def test_it_reports_a_lost_gpu_and_the_missing_count(collected):
    contribution, _ = collected
    assert [g["index"] for g in contribution.fields["gpus"]] == [0, 1, 2, 3, 4, 6, 7]
    assert contribution.notes["nvml.gpu5"] == "unreadable: GPU is lost"
    assert contribution.notes["gpu_count"] == "NVML sees 8 GPUs but only 7 answered"


def test_it_turns_one_failing_field_into_none_and_a_note(collected):
    contribution, _ = collected
    gpu2 = contribution.fields["gpus"][2]
    assert "power_w" not in gpu2 and gpu2["temperature_c"] == 30
    assert contribution.notes["nvml.gpu2.power_w"] == "Unknown Error"


def test_it_shows_degraded_links_and_memory_counters(collected):
    gpus = {g["index"]: g for g in collected[0].fields["gpus"]}
    assert gpus[3]["nvlink_links_up"] == 17 and gpus[3]["nvlink_replay_errors"] == 7
    assert gpus[3]["remapped_rows_pending"] is True and gpus[3]["remapped_rows_uncorrectable"] == 1
    assert gpus[3]["ecc_volatile_corrected"] == 12
    assert gpus[6]["pcie_link_width"] == 8 and gpus[6]["pcie_max_link_width"] == 16


def test_it_notes_fewer_gpus_than_expected():
    data = FakeNvml().data
    data["gpus"] = data["gpus"][:7]
    data["gpus"][5] = data["gpus"][6]
    contribution = NvmlCollector(FakeNvml(data), expected_gpus=8).collect()
    assert contribution.notes["gpu_count"] == "expected 8 GPUs, NVML sees 7"


def test_it_fails_as_a_whole_when_nvml_cannot_start():
    nvml = FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(CollectorError, match="nvmlInit failed: Driver Not Loaded"):
        NvmlCollector(nvml).collect()


def test_it_drops_an_implausible_temperature_instead_of_voiding_the_report():
    data = FakeNvml().data
    data["gpus"][0]["temp"] = 65535  # what a wedged GPU can answer
    contribution = NvmlCollector(FakeNvml(data)).collect()
    assert "temperature_c" not in contribution.fields["gpus"][0]
    assert contribution.notes["nvml.gpu0.temperature_c"] == "implausible value 65535 dropped"


def test_it_always_shuts_nvml_down(collected):
    assert collected[1].shutdowns == 1
