"""Retention: raw samples roll up into hours past the window; old history is pruned."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
import time_machine
from django.test import override_settings

from telemetry.ingest import ingest_reports
from telemetry.models import GpuSample, GpuSampleHourly, NodeReport, XidIdentity, XidRecord
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


def test_by_default_roll_ups_are_kept_a_year_and_raw_samples_two_weeks(node):
    # Issue 17: raw samples for a configurable window (14 days), roll-ups for a year.
    now = T0 + timedelta(days=400)
    for days in (366, 364):
        GpuSampleHourly.objects.create(node=node, hour=now - timedelta(days=days), gpu_index=0, n=120)
    with time_machine.travel(now, tick=False):
        send(node, now - timedelta(days=14, hours=2), 1)  # past the raw window: rolled up
        send(node, now - timedelta(days=13), 1)  # inside it: stays raw
        roll_up_and_prune()
    assert sorted(GpuSampleHourly.objects.values_list("hour", flat=True).distinct()) == [
        now - timedelta(days=364),
        (now - timedelta(days=14, hours=2)).replace(minute=0),
    ]
    assert set(GpuSample.objects.values_list("collected_at", flat=True)) == {now - timedelta(days=13)}


def test_by_default_reports_are_kept_as_long_as_raw_samples(node):
    # Issue 17: reports at 90 days were most of a year's bytes (bin/bench storage); nothing reads them.
    now = T0 + timedelta(days=30)
    with time_machine.travel(now, tick=False):
        send(node, now - timedelta(days=14, hours=2), 1)  # past the raw window: pruned
        send(node, now - timedelta(days=13), 1, seed=1)  # inside it: kept
        roll_up_and_prune()
    assert list(NodeReport.objects.values_list("collected_at", flat=True)) == [now - timedelta(days=13)]
