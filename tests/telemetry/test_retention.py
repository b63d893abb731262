"""Retention: raw samples roll up into hours past the window; old history is pruned."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
import time_machine
from django.test import override_settings

from telemetry.ingest import ingest_reports
from telemetry.models import GpuSample, GpuSampleDaily, GpuSampleHourly, NodeReport, XidIdentity, XidRecord
from telemetry.retention import roll_up_and_prune
from telemetry.schema import AgentReport
from telemetry.tasks import roll_up_and_prune as roll_up_task
from telemetry.testing import make_batch, make_report

from .conftest import T0

pytestmark = pytest.mark.django_db


def send(node, start, count, seed=0, every_s=30.0):
    reports = [
        msgspec.convert(r, AgentReport)
        for r in make_batch(node.hostname, start=start, count=count, seed=seed, every_s=every_s)["reports"]
    ]
    return ingest_reports(node.pk, reports)


def test_it_rolls_samples_older_than_the_window_into_hours_and_deletes_them(node):
    send(node, T0, 4, every_s=600)  # 12:00 .. 12:30: one hour
    with time_machine.travel(T0 + timedelta(days=10, minutes=1), tick=False):  # ingest refuses the future
        send(node, T0 + timedelta(days=10), 2, seed=100)  # recent: stays raw
    temps = list(
        GpuSample.objects.filter(node=node, gpu_index=2, collected_at__lt=T0 + timedelta(hours=1)).values_list(
            "temperature_c", flat=True
        )
    )
    with time_machine.travel(T0 + timedelta(days=15), tick=False):
        result = roll_up_and_prune()
    assert result.rolled_up == 32 and result.finished
    assert GpuSample.objects.filter(node=node).count() == 16
    hour = GpuSampleHourly.objects.get(node=node, gpu_index=2)
    assert hour.hour == T0 and hour.n == 4
    assert hour.temperature_max == max(temps)
    assert hour.temperature_avg == pytest.approx(sum(temps) / 4)
    assert (hour.pcie_link_gen_min, hour.ecc_volatile_uncorrected_max) == (5, 0)


def test_running_it_again_changes_nothing(node):
    send(node, T0, 3)
    with time_machine.travel(T0 + timedelta(days=15), tick=False):
        roll_up_and_prune()
        before = list(GpuSampleHourly.objects.order_by("gpu_index").values())
        roll_up_and_prune()
    assert list(GpuSampleHourly.objects.order_by("gpu_index").values()) == before


def test_late_rows_for_an_hour_already_rolled_up_merge_into_it(node):
    send(node, T0, 2)
    with time_machine.travel(T0 + timedelta(days=15), tick=False):
        roll_up_and_prune()
        send(node, T0 + timedelta(minutes=30), 2, seed=50)  # a very late buffer flush
        roll_up_and_prune()
    hour = GpuSampleHourly.objects.get(node=node, gpu_index=0)
    assert hour.n == 4
    assert not GpuSample.objects.exists()


@override_settings(TELEMETRY_RAW_RETENTION_DAYS=1, TELEMETRY_REPORT_RETENTION_DAYS=30, TELEMETRY_XID_RETENTION_DAYS=365)
def test_reports_and_xid_records_are_pruned_after_their_own_windows(node):
    ingest_reports(node.pk, [msgspec.convert(make_report(node.hostname, collected_at=T0, xid=79), AgentReport)])
    with time_machine.travel(T0 + timedelta(days=40), tick=False):
        result = roll_up_and_prune()
    assert not NodeReport.objects.exists()
    assert XidRecord.objects.count() == XidIdentity.objects.count() == 1  # evidence outlives the reports
    assert result.deleted["nodereport"] == 1
    with time_machine.travel(T0 + timedelta(days=366), tick=False):
        roll_up_and_prune()
    assert not XidRecord.objects.exists() and not XidIdentity.objects.exists()


def test_a_run_stops_after_its_batch_budget_and_the_next_one_carries_on(node):
    for day in range(3):
        send(node, T0 + timedelta(days=day), 1, seed=day)
    with time_machine.travel(T0 + timedelta(days=30), tick=False):
        first = roll_up_and_prune(max_batches=2)
        assert not first.finished and GpuSample.objects.count() == 8
        assert roll_up_and_prune().finished
    assert not GpuSample.objects.exists() and GpuSampleHourly.objects.count() == 24


def test_the_celery_task_runs_the_same_roll_up(node):
    send(node, T0, 1)
    with time_machine.travel(T0 + timedelta(days=15), tick=False):
        result = roll_up_task()
    assert result["rolled_up"] == 8


def test_by_default_hours_are_kept_a_month_days_a_year_and_raw_samples_two_weeks(node):
    # Issue 17: raw samples for a configurable window (14 days), roll-ups for a year: hourly ones for
    # 30 days (a year of them was 1.64 TB at 100,000 nodes), then one row per GPU and day.
    now = T0 + timedelta(days=400)
    midnight = now.replace(hour=0)
    for days in (366, 364, 31, 29):
        GpuSampleHourly.objects.create(node=node, hour=midnight - timedelta(days=days), gpu_index=0, n=120)
    with time_machine.travel(now, tick=False):
        send(node, now - timedelta(days=14, hours=2), 1)  # past the raw window: rolled up
        send(node, now - timedelta(days=13), 1)  # inside it: stays raw
        result = roll_up_and_prune()
    assert sorted(GpuSampleHourly.objects.values_list("hour", flat=True).distinct()) == [
        midnight - timedelta(days=29),
        (now - timedelta(days=14, hours=2)).replace(minute=0),
    ]
    # 364 and 31 days old: days now; 366 days old: rolled into a day, then pruned with it.
    assert sorted(GpuSampleDaily.objects.values_list("day", flat=True)) == [
        midnight - timedelta(days=364),
        midnight - timedelta(days=31),
    ]
    assert result.rolled_up_hours == 3 and result.deleted["gpusampledaily"] == 1
    assert set(GpuSample.objects.values_list("collected_at", flat=True)) == {now - timedelta(days=13)}


def _hour(node, at, gpu=0, **figures):
    return GpuSampleHourly(node=node, hour=at, gpu_index=gpu, **figures)


@pytest.fixture
def old_day(node):
    """Three hours of GPU 0 and one of GPU 1 on a day 40 days before T0, one hour of the day after,
    and a recent hour: the hourly rows retention turns into days (TELEMETRY_HOURLY_RETENTION_DAYS 30)."""
    day = T0.replace(hour=0) - timedelta(days=40)
    hours = [
        _hour(node, day + timedelta(hours=1), n=120, temperature_avg=60.0, temperature_max=64.0, power_avg=500.0,
              power_max=610.0, utilization_avg=95.0, ecc_aggregate_corrected_max=7, pcie_link_gen_min=5,
              remapped_rows_correctable_max=1),
        _hour(node, day + timedelta(hours=9), n=60, temperature_avg=70.0, temperature_max=79.5, power_avg=650.0,
              power_max=700.0, utilization_avg=85.0, ecc_aggregate_corrected_max=9, pcie_link_gen_min=4,
              remapped_rows_correctable_max=2),
        # Idle and without power readings: weighs in the temperature, not the power or the load.
        _hour(node, day + timedelta(hours=23), n=30, temperature_avg=40.0, temperature_max=41.0, power_avg=None,
              utilization_avg=5.0, ecc_aggregate_corrected_max=9, pcie_link_gen_min=5),
        _hour(node, day + timedelta(hours=2), gpu=1, n=120, temperature_avg=50.0, temperature_max=52.0,
              utilization_avg=10.0),
        _hour(node, day + timedelta(days=1, hours=3), n=120, temperature_avg=55.0, utilization_avg=90.0),
        _hour(node, T0 - timedelta(days=20), n=120, temperature_avg=58.0),
    ]  # fmt: skip
    GpuSampleHourly.objects.bulk_create(hours)
    return day


@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30)
def test_hours_past_their_window_become_one_row_per_gpu_and_day_as_rolled_up_by_hand(node, old_day):
    result = roll_up_and_prune(now=T0)
    assert result.rolled_up_hours == 5 and result.finished
    assert list(GpuSampleHourly.objects.values_list("hour", flat=True)) == [T0 - timedelta(days=20)]
    gpu0 = GpuSampleDaily.objects.get(node=node, day=old_day, gpu_index=0)
    assert gpu0.n == 120 + 60 + 30
    assert gpu0.temperature_avg == pytest.approx((60 * 120 + 70 * 60 + 40 * 30) / 210)  # weighted by samples
    assert gpu0.power_avg == pytest.approx((500 * 120 + 650 * 60) / 180)  # the hour without power weighs nothing
    assert (gpu0.temperature_max, gpu0.power_max) == (79.5, 700.0)  # max of maxes
    assert gpu0.utilization_avg == pytest.approx((95 * 120 + 85 * 60 + 5 * 30) / 210)
    assert (gpu0.ecc_aggregate_corrected_max, gpu0.remapped_rows_correctable_max) == (9, 2)
    assert gpu0.pcie_link_gen_min == 4  # min of mins
    assert gpu0.ecc_volatile_uncorrected_max is None  # never reported stays unknown, not 0
    # Under load (>= 80 % an hour): the two busy hours' temperature, what the trends compare.
    assert gpu0.load_n == 180 and gpu0.load_temperature_avg == pytest.approx((60 * 120 + 70 * 60) / 180)
    gpu1 = GpuSampleDaily.objects.get(node=node, day=old_day, gpu_index=1)
    assert (gpu1.n, gpu1.temperature_avg, gpu1.load_n, gpu1.load_temperature_avg) == (120, 50.0, 0, None)
    next_day = GpuSampleDaily.objects.get(node=node, day=old_day + timedelta(days=1))
    assert (next_day.n, next_day.load_n) == (120, 120)


@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30)
def test_rolling_days_up_again_changes_nothing_and_late_hours_merge_by_weight(node, old_day):
    roll_up_and_prune(now=T0)
    before = list(GpuSampleDaily.objects.order_by("day", "gpu_index").values())
    assert roll_up_and_prune(now=T0 + timedelta(hours=1)).rolled_up_hours == 0
    assert list(GpuSampleDaily.objects.order_by("day", "gpu_index").values()) == before
    # A late hour of a day already rolled up (a very late buffer flush, rolled into hours late).
    GpuSampleHourly.objects.create(
        node=node, hour=old_day + timedelta(hours=12), gpu_index=0, n=90, temperature_avg=80.0, utilization_avg=99.0
    )
    assert roll_up_and_prune(now=T0 + timedelta(hours=2)).rolled_up_hours == 1
    gpu0 = GpuSampleDaily.objects.get(node=node, day=old_day, gpu_index=0)
    assert gpu0.n == 300
    assert gpu0.temperature_avg == pytest.approx((60 * 120 + 70 * 60 + 40 * 30 + 80 * 90) / 300, rel=1e-6)
    assert gpu0.load_n == 270
    assert gpu0.load_temperature_avg == pytest.approx((60 * 120 + 70 * 60 + 80 * 90) / 270, rel=1e-6)
    assert gpu0.temperature_max == 79.5  # the late hour had none: the day's stays


@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30)
def test_a_day_is_rolled_up_within_the_batch_budget_and_the_next_run_carries_on(node, old_day):
    first = roll_up_and_prune(now=T0, max_batches=1)
    assert not first.finished and first.rolled_up_hours == 4  # the older day, one batch
    assert GpuSampleHourly.objects.filter(hour__lt=T0 - timedelta(days=30)).count() == 1
    assert roll_up_and_prune(now=T0).finished
    assert GpuSampleDaily.objects.count() == 3


def test_by_default_reports_are_kept_as_long_as_raw_samples(node):
    # Issue 17: reports at 90 days were most of a year's bytes (bin/bench storage); nothing reads them.
    now = T0 + timedelta(days=30)
    with time_machine.travel(now, tick=False):
        send(node, now - timedelta(days=14, hours=2), 1)  # past the raw window: pruned
        send(node, now - timedelta(days=13), 1, seed=1)  # inside it: kept
        roll_up_and_prune()
    assert list(NodeReport.objects.values_list("collected_at", flat=True)) == [now - timedelta(days=13)]


def _busy_every_other(node, start, count, *, busy=(100.0, 70.0), idle=(70.0, 50.0), seed=0):
    """Reports 30 s apart whose GPUs are busy (utilisation %, °C) on odd reports and idle on even ones."""
    reports = []
    for i in range(count):
        report = make_report(node.hostname, collected_at=start + timedelta(seconds=30 * i), seed=seed + i, seq=seed + i)
        for gpu in report["gpus"]:
            gpu["utilization_pct"], gpu["temperature_c"] = busy if i % 2 else idle
        reports.append(msgspec.convert(report, AgentReport))
    return ingest_reports(node.pk, reports)


@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30)
def test_an_hour_counts_its_samples_under_load_one_by_one_and_its_day_keeps_them(node):
    # 85 % on average: the hour as a whole is "under load", yet only its busy samples ran at 70 °C.
    # The trends compare those (trends.collect reads load_n and load_temperature_avg).
    _busy_every_other(node, T0, 60)
    with time_machine.travel(T0 + timedelta(days=15), tick=False):
        roll_up_and_prune()
        _busy_every_other(node, T0 + timedelta(minutes=40), 10, busy=(100.0, 80.0), seed=100)  # late, merged
        roll_up_and_prune()
    hour = GpuSampleHourly.objects.get(node=node, gpu_index=3)
    assert hour.n == 70 and hour.utilization_avg == pytest.approx(85.0)
    assert hour.load_n == 35
    assert hour.load_temperature_avg == pytest.approx((30 * 70 + 5 * 80) / 35)
    with time_machine.travel(T0 + timedelta(days=45), tick=False):
        roll_up_and_prune()
    day = GpuSampleDaily.objects.get(node=node, gpu_index=3)
    assert (day.n, day.load_n) == (70, 35)  # not the whole hour's 70
    assert day.load_temperature_avg == pytest.approx((30 * 70 + 5 * 80) / 35)
