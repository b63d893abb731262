"""Charts over long windows (telemetry.series): past the hourly window they read daily roll-ups."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import override_settings

from telemetry.models import GpuSampleDaily, GpuSampleHourly
from telemetry.retention import roll_up_and_prune
from telemetry.series import gpu_series

from .conftest import T0

pytestmark = pytest.mark.django_db

NOW = T0.replace(hour=0)  # midnight: a window of whole days
DAYS = 120


def temperature(day: int) -> float:
    return 50.0 + day % 7  # a weekly sawtooth: the shape a chart must keep


@pytest.fixture
def hours(node):
    """120 days of one GPU's hourly roll-ups, each day's hours alike, its power rising day by day."""
    GpuSampleHourly.objects.bulk_create(
        GpuSampleHourly(
            node=node,
            hour=NOW - timedelta(days=ago, hours=-h),
            gpu_index=0,
            n=120,
            temperature_max=temperature(DAYS - ago),
            power_avg=300.0 + (DAYS - ago) + h / 10,
            power_max=400.0 + (DAYS - ago),
        )
        for ago in range(DAYS, 0, -1)
        for h in range(24)
    )
    return node


def _points(series, *, before=None, after=None):
    return [p for p in series.gpus[0] if (before is None or p["t"] < before) and (after is None or p["t"] >= after)]


@pytest.mark.parametrize("window_days", [90, 365])
@override_settings(TELEMETRY_HOURLY_RETENTION_DAYS=30, TELEMETRY_RAW_RETENTION_DAYS=14)
@time_machine.travel(NOW, tick=False)
def test_a_long_chart_reads_the_days_and_keeps_the_shape_of_the_hours(hours, window_days):
    since = NOW - timedelta(days=window_days)
    from_hours = gpu_series(hours.pk, since=since, until=NOW, gpu_count=1)
    assert roll_up_and_prune(now=NOW).finished
    assert GpuSampleDaily.objects.count() == DAYS - 30 and GpuSampleHourly.objects.count() == 30 * 24
    from_days = gpu_series(hours.pk, since=since, until=NOW, gpu_count=1)
    # Every sample still counted, the extremes and the weighted mean unchanged (buckets of hours: the
    # raw window's packed hours are read from their roll-ups too, telemetry.series).
    days = min(DAYS, window_days)
    assert sum(p["n"] for p in from_days.gpus[0]) == sum(p["n"] for p in from_hours.gpus[0]) == days * 24 * 120
    for name in ("temperature_max", "power_max"):
        assert max(p[name] for p in from_days.gpus[0]) == max(p[name] for p in from_hours.gpus[0])
    assert sum(p["power_avg"] * p["n"] for p in from_days.gpus[0]) == pytest.approx(
        sum(p["power_avg"] * p["n"] for p in from_hours.gpus[0]), rel=1e-6
    )
    # Past the hourly window: one point a day (buckets are finer than a day), each the day's figures.
    cutoff = NOW - timedelta(days=30)
    old = _points(from_days, before=cutoff - timedelta(seconds=from_days.bucket_s))  # not the bucket across it
    first = DAYS - days
    assert [p["temperature_max"] for p in old] == [temperature(day) for day in range(first, DAYS - 30)]
    assert [p["power_max"] for p in old] == [400.0 + day for day in range(first, DAYS - 30)]
    # Inside it the chart is what it was.
    recent = cutoff + timedelta(seconds=from_days.bucket_s)
    assert _points(from_days, after=recent) == _points(from_hours, after=recent)
