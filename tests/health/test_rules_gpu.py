"""GPU rules on realistic readings: firing, not firing, hysteresis, counter resets."""

from __future__ import annotations

import pytest

from health.choices import AlertState
from health.choices import RecommendedAction as A
from health.choices import Severity as S
from health.models import Alert, Finding
from health.rules.gpu import pcie_replay_budget

from .conftest import T0, gpu, minutes, report


def firing(node, rule):
    return list(Alert.objects.filter(node=node, rule=rule, state=AlertState.FIRING))


def healthy_with(index=0, **fields):
    return [gpu(i, **fields) if i == index else gpu(i) for i in range(8)]


def test_a_healthy_h100_fires_nothing(node, feed):
    feed.send(report(T0))
    feed.send(report(T0 + minutes(0.5)))

    assert not Finding.objects.exists() and not Alert.objects.exists()


def test_temperature_fires_above_the_gpus_own_limit_and_clears_only_below_the_band(node, feed):
    feed.send(report(T0, gpus=healthy_with(2, temperature_c=88.0)))
    [alert] = firing(node, "gpu_temperature")
    assert (alert.gpu_index, alert.severity) == (2, S.DEGRADED)
    assert alert.last_finding.evidence == {"temperature_c": 88.0, "limit_c": 87.0, "clears_at_c": 82.0}

    feed.send(report(T0 + minutes(1), gpus=healthy_with(2, temperature_c=84.0)))
    feed.send(report(T0 + minutes(10), gpus=healthy_with(2, temperature_c=84.0)))
    assert firing(node, "gpu_temperature"), "84 C is inside the hysteresis band: still firing"

    feed.send(report(T0 + minutes(11), gpus=healthy_with(2, temperature_c=80.0)))
    assert firing(node, "gpu_temperature"), "clear, but not yet for clear_after_seconds"
    feed.send(report(T0 + minutes(16), gpus=healthy_with(2, temperature_c=80.0)))
    assert not firing(node, "gpu_temperature")
    resolved = Alert.objects.get(node=node, rule="gpu_temperature")
    assert resolved.resolved_reason.startswith("condition clear")


def test_temperature_back_above_the_limit_restarts_the_clear_clock(node, feed):
    feed.send(report(T0, gpus=healthy_with(0, temperature_c=90.0)))
    feed.send(report(T0 + minutes(1), gpus=healthy_with(0, temperature_c=70.0)))
    feed.send(report(T0 + minutes(3), gpus=healthy_with(0, temperature_c=89.0)))
    feed.send(report(T0 + minutes(7), gpus=healthy_with(0, temperature_c=70.0)))

    [alert] = firing(node, "gpu_temperature")
    assert alert.occurrences == 2
    assert Finding.objects.filter(rule="gpu_temperature").count() == 1


def test_temperature_uses_the_default_threshold_when_the_gpu_reports_no_limit(node, feed):
    feed.send(report(T0, gpus=healthy_with(1, temperature_c=86.0, max_operating_temp_c=None)))
    assert not firing(node, "gpu_temperature")
    feed.send(report(T0 + minutes(1), gpus=healthy_with(1, temperature_c=87.5, max_operating_temp_c=None)))
    assert firing(node, "gpu_temperature")


def test_hbm_temperature_fires_above_95(node, feed):
    feed.send(report(T0, gpus=healthy_with(4, hbm_temperature_c=96.0)))

    assert firing(node, "hbm_temperature")[0].gpu_index == 4


@pytest.mark.parametrize(
    ("fields", "rule", "action"),
    [
        ({"ecc_volatile_uncorrected": 2}, "ecc_uncorrectable", A.RESET_GPU),
        ({"remapped_rows_pending": True}, "row_remap_pending", A.RESET_GPU),
        ({"remapped_rows_failure": True}, "row_remap_failure", A.RMA),
        ({"remapped_rows_uncorrectable": 512}, "row_remap_uncorrectable_limit", A.RMA),
        ({"retired_pages_sbe": 40, "retired_pages_dbe": 23}, "retired_pages", A.RMA),
        ({"nvlink_links_up": 16}, "nvlink_down", A.RESET_GPU),
        ({"pcie_link_width": 8}, "pcie_degraded", A.INSPECT),
        ({"clock_event_reasons": 0x40 | 0x1}, "clock_slowdown", A.INSPECT),
        ({"recovery_action": 1}, "recovery_action", A.RESET_GPU),
    ],
)
def test_memory_link_and_clock_rules_fire_with_their_action(node, feed, fields, rule, action):
    feed.send(report(T0, gpus=healthy_with(5, **fields)))

    [alert] = firing(node, rule)
    assert (alert.gpu_index, alert.recommended_action) == (5, action)


def test_just_below_the_limits_nothing_fires(node, feed):
    feed.send(
        report(
            T0,
            gpus=healthy_with(
                5,
                remapped_rows_uncorrectable=511,
                retired_pages_sbe=40,
                retired_pages_dbe=22,
                clock_event_reasons=0x1 | 0x4,
            ),
        )
    )

    assert not Alert.objects.exists()


def test_a_pending_page_retirement_is_a_warning_to_reboot(node, feed):
    feed.send(report(T0, gpus=healthy_with(0, retired_pages_sbe=1, retired_pages_pending=True)))

    [alert] = firing(node, "retired_pages")
    assert (alert.subject, alert.severity, alert.recommended_action) == ("pending", S.WARNING, A.REBOOT)


def test_a_node_reboot_recovery_action_is_catastrophic(node, feed):
    feed.send(report(T0, gpus=healthy_with(3, recovery_action=2)))

    [alert] = firing(node, "recovery_action")
    assert (alert.severity, alert.recommended_action) == (S.CATASTROPHIC, A.REBOOT)


def test_a_lower_pcie_generation_counts_only_while_the_gpu_is_busy(node, feed):
    feed.send(report(T0, gpus=healthy_with(0, pcie_link_gen=1, utilization_pct=0.0)))
    assert not firing(node, "pcie_degraded"), "idle GPUs downshift PCIe to save power"

    feed.send(report(T0 + minutes(1), gpus=healthy_with(0, pcie_link_gen=3, utilization_pct=90.0)))
    [alert] = firing(node, "pcie_degraded")
    assert (alert.subject, alert.severity) == ("gen", S.WARNING)


def test_nvlink_crc_rate_fires_at_100_per_second_from_deltas(node, feed):
    feed.send(report(T0, gpus=healthy_with(1, nvlink_crc_errors=1_000)))
    feed.send(report(T0 + minutes(0.5), gpus=healthy_with(1, nvlink_crc_errors=1_000 + 30 * 99)))
    assert not firing(node, "nvlink_crc_rate")

    feed.send(report(T0 + minutes(1), gpus=healthy_with(1, nvlink_crc_errors=1_000 + 30 * 99 + 30 * 100)))
    [alert] = firing(node, "nvlink_crc_rate")
    assert alert.last_finding.evidence["rate_per_s"] == 100


def test_a_counter_reset_is_not_a_negative_delta_nor_a_burst(node, feed):
    feed.send(report(T0, gpus=healthy_with(1, nvlink_crc_errors=900_000, nvlink_replay_errors=50)))
    feed.send(report(T0 + minutes(0.5), gpus=healthy_with(1, nvlink_crc_errors=12, nvlink_replay_errors=0)))

    assert not Alert.objects.exists()


def test_nvlink_replay_errors_rising_is_a_warning(node, feed):
    feed.send(report(T0, gpus=healthy_with(6, nvlink_replay_errors=3)))
    feed.send(report(T0 + minutes(0.5), gpus=healthy_with(6, nvlink_replay_errors=4)))

    assert firing(node, "nvlink_replay_recovery")[0].severity == S.WARNING


def test_pcie_replays_above_the_gen5_x16_budget_of_31_per_minute_warn(node, feed):
    assert pcie_replay_budget(5, 16) == 31 and pcie_replay_budget(4, 16) == 16
    feed.send(report(T0, gpus=healthy_with(2, pcie_replay_count=100)))
    feed.send(report(T0 + minutes(1), gpus=healthy_with(2, pcie_replay_count=131)))
    assert not firing(node, "pcie_replay_rate")

    feed.send(report(T0 + minutes(2), gpus=healthy_with(2, pcie_replay_count=163)))
    assert firing(node, "pcie_replay_rate")


def test_a_gpu_missing_against_the_profile_is_catastrophic(node, feed):
    feed.send(report(T0, gpus=[gpu(i) for i in range(7)]))

    [alert] = firing(node, "gpu_missing")
    assert (alert.severity, alert.recommended_action) == (S.CATASTROPHIC, A.REBOOT)


def test_a_gpu_seen_before_and_now_absent_is_missing(node, feed):
    feed.send(report(T0, gpus=[gpu(i) for i in range(4)]), expected_gpu_count=None)
    feed.send(report(T0 + minutes(0.5), gpus=[gpu(i) for i in (0, 1, 3)]), expected_gpu_count=None)

    [alert] = firing(node, "gpu_missing")
    assert alert.last_finding.evidence["vanished"] == [2]


def test_nvml_failing_is_catastrophic_and_not_also_gpu_missing(node, feed):
    feed.send(report(T0, gpus=[], collector_errors={"nvml": "NVML_ERROR_DRIVER_NOT_LOADED"}))

    assert firing(node, "nvml_unavailable")[0].severity == S.CATASTROPHIC
    assert not firing(node, "gpu_missing")
