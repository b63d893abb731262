"""Raw history packed per node-hour (issue 17, "history that fits"): the format gives back what it
got, the beat packs each past hour once, readers see the same series before and after, a report
resent after its hour was packed is still a duplicate, and retention drops packs with the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
import time_machine
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from telemetry import packformat, packing
from telemetry.ingest import ingest_many, ingest_reports
from telemetry.models import GpuSample, GpuSampleHourly, NodeReport, TelemetryHourPack
from telemetry.retention import roll_up_and_prune
from telemetry.schema import AgentReport
from telemetry.series import gpu_series
from telemetry.tasks import pack_past_hours as pack_task
from telemetry.testing import make_report
from tests.factories import NodeFactory
from trends.collect import _telemetry as trend_telemetry

from .conftest import T0

pytestmark = pytest.mark.django_db
NOW = T0 + timedelta(hours=5)


def _reports(hostname: str, start: datetime, count: int, *, every_s: int = 30) -> list[AgentReport]:
    return [
        msgspec.convert(
            make_report(hostname, collected_at=start + timedelta(seconds=every_s * i), seed=i, seq=i), AgentReport
        )
        for i in range(count)
    ]


def _ingest(node, start: datetime, count: int, **kw) -> None:
    with time_machine.travel(start + timedelta(seconds=30 * count), tick=False):
        ingest_reports(node.pk, _reports(node.hostname, start, count, **kw))


def _raw_rows(node) -> tuple[list[dict], list[dict]]:
    fields = ["collected_at", *packing._REPORT_KINDS]
    reports = list(NodeReport.objects.filter(node=node).order_by("collected_at").values(*fields))
    samples = list(
        GpuSample.objects.filter(node=node)
        .order_by("gpu_index", "collected_at")
        .values("collected_at", "gpu_index", *packing.SAMPLE_FIELDS)
    )
    return reports, samples


# --- The format -------------------------------------------------------------------------------


def test_a_blob_decodes_to_exactly_what_was_encoded_nulls_missing_gpus_and_all():
    hour = T0
    kinds = {"r": packing._REPORT_KINDS, "g": {"t": "r", "p": "f", "c": "i", "f": "b", "w": "f"}}
    reports = [
        {
            "collected_at": hour + timedelta(seconds=30 * i, microseconds=7),
            "report_id": f"r{i}",
            "received_at": hour + timedelta(seconds=30 * i + 2, microseconds=123),
            "seq": 1000 + i,
            "source": "agent",
            "gpu_count": 2,
            "xid_count": i % 2,
            "summary": {"host": {"load": [0.5, 1.25]}} if i < 2 else {"host": None, "errors": {"nvml": "x"}},
        }
        for i in range(4)
    ]
    samples = []
    for i in range(4):
        for gpu in (0, 3):
            if gpu == 3 and i == 1:
                continue  # GPU 3 missing from one report
            samples.append(
                {
                    "collected_at": reports[i]["collected_at"],
                    "gpu_index": gpu,
                    "t": [41.0, None, 43.5, 44.0][i],  # a real column, exact in 4 bytes
                    "p": [312.45, 99.99, None, 0.1][i],
                    "c": [2**62, None, 2**62 + 1, 0][i],
                    "f": [True, None, False, True][i],
                    "w": [1.0 / 3, 2.0, 1e-9, None][i],  # no decimal scale reproduces 1/3: kept as floats
                }
            )
    blob = packformat.encode(hour, reports, samples, kinds)
    assert blob[0] == packformat.VERSION
    got_reports, got_samples = packformat.decode(hour, blob, kinds)
    assert got_reports == reports
    assert got_samples == sorted(samples, key=lambda s: (s["gpu_index"], s["collected_at"]))
    assert packformat.report_times(hour, blob) == [r["collected_at"] for r in reports]


def test_an_hour_without_reports_packs_and_unknown_versions_are_refused():
    kinds = {"r": packing._REPORT_KINDS, "g": {"t": "f"}}
    blob = packformat.encode(T0, [], [], kinds)
    assert packformat.decode(T0, blob, kinds) == ([], [])
    with pytest.raises(packformat.PackFormatError):
        packformat.decode(T0, b"\x09" + blob[1:], kinds)


# --- The beat ---------------------------------------------------------------------------------


def test_it_packs_each_past_hour_into_one_row_per_node_and_deletes_the_raw_rows(node):
    _ingest(node, T0, 130)  # 12:00 to 13:04:30: the 13:00 hour is not past yet at 13:05
    reports, samples = _raw_rows(node)
    result = packing.pack_past_hours(now=T0 + timedelta(hours=1, minutes=10))
    assert (result.packs, result.reports, result.samples) == (1, 120, 960)
    pack = TelemetryHourPack.objects.get(node=node)
    assert (pack.hour, pack.reports, pack.samples) == (T0, 120, 960)
    assert NodeReport.objects.filter(collected_at__lt=T0 + timedelta(hours=1)).count() == 0
    assert GpuSample.objects.filter(collected_at__lt=T0 + timedelta(hours=1)).count() == 0
    assert NodeReport.objects.count() == 10  # the running hour stays raw
    got_reports, got_samples = packformat.decode(T0, bytes(pack.blob), packing.columns())
    assert got_reports == reports[:120]
    assert got_samples == [s for s in samples if s["collected_at"] < T0 + timedelta(hours=1)]
    # The hour's roll-up was made from the raw rows before they went.
    assert GpuSampleHourly.objects.filter(node=node, hour=T0).count() == 8
    assert set(GpuSampleHourly.objects.values_list("n", flat=True)) == {120}


def test_running_it_twice_packs_nothing_more(node):
    _ingest(node, T0, 120)
    packing.pack_past_hours(now=NOW)
    blob = bytes(TelemetryHourPack.objects.get(node=node).blob)
    again = packing.pack_past_hours(now=NOW)
    assert (again.packs, again.reports, again.samples) == (0, 0, 0)
    assert bytes(TelemetryHourPack.objects.get(node=node).blob) == blob
    assert GpuSampleHourly.objects.get(node=node, hour=T0, gpu_index=0).n == 120


def test_late_reports_of_a_packed_hour_join_its_pack(node):
    with time_machine.travel(NOW, tick=False):
        ingest_reports(node.pk, _reports(node.hostname, T0, 60, every_s=60))  # every other 30 s slot
        packing.pack_past_hours(now=NOW)
        late = _reports(node.hostname, T0 + timedelta(seconds=30), 60, every_s=60)
        assert ingest_reports(node.pk, late).accepted == 60
        packing.pack_past_hours(now=NOW)
    pack = TelemetryHourPack.objects.get(node=node)
    assert (pack.reports, pack.samples) == (120, 960)
    assert not NodeReport.objects.exists()
    assert GpuSampleHourly.objects.get(node=node, hour=T0, gpu_index=0).n == 120


def test_the_celery_task_and_a_bounded_run(node):
    other = NodeFactory(hostname="gpu-a-002")
    _ingest(node, T0, 240)
    _ingest(other, T0, 240)
    with time_machine.travel(NOW, tick=False):
        assert pack_task()["packs"] == 4
    assert not NodeReport.objects.exists()


def test_a_report_resent_after_its_hour_was_packed_is_a_duplicate(node):
    reports = _reports(node.hostname, T0, 120)
    with time_machine.travel(NOW, tick=False):
        ingest_reports(node.pk, reports)
        packing.pack_past_hours(now=NOW)
        again = ingest_reports(node.pk, reports[5:7] + _reports(node.hostname, T0 + timedelta(hours=2), 1))
    assert (again.accepted, again.duplicates) == (1, 2)
    assert NodeReport.objects.count() == 1  # only the new one, of 14:00
    assert GpuSample.objects.filter(collected_at__lt=T0 + timedelta(hours=1)).count() == 0


# --- Readers ----------------------------------------------------------------------------------


def _approx(gpus: dict[int, list[dict]]) -> dict[int, list[dict]]:
    # PostgreSQL averages its 4-byte readings in its own order: the 7th digit may differ by one.
    return {
        g: [{k: pytest.approx(v, rel=1e-6) if isinstance(v, float) else v for k, v in row.items()} for row in rows]
        for g, rows in gpus.items()
    }


@pytest.mark.parametrize("window", [timedelta(hours=1), timedelta(hours=3)])
def test_charts_read_the_same_series_before_and_after_packing(node, window):
    _ingest(node, T0, 300)  # 2.5 hours
    with time_machine.travel(NOW, tick=False):
        since = T0 + timedelta(hours=2, minutes=30) - window
        before = gpu_series(node.pk, since=since, until=NOW, gpu_count=8)
        packing.pack_past_hours(now=NOW)
        assert TelemetryHourPack.objects.count() == 3
        after = gpu_series(node.pk, since=since, until=NOW, gpu_count=8)
        one_gpu = gpu_series(node.pk, since=since, until=NOW, gpu_count=8, gpu=3)
    assert before.points > 0
    assert after.gpus == _approx(before.gpus)
    assert list(one_gpu.gpus) == [3] and one_gpu.points > 0


def test_a_chart_of_hour_wide_buckets_reads_packed_hours_from_their_roll_ups_not_the_packs(node, monkeypatch):
    _ingest(node, T0, 300)  # 2.5 hours: two packed hours and a raw half hour
    with time_machine.travel(NOW, tick=False):
        since = NOW - timedelta(days=7)
        before = gpu_series(node.pk, since=since, until=NOW, gpu_count=8)
        assert before.bucket_s >= 3600
        packing.pack_past_hours(now=T0 + timedelta(hours=2, minutes=20))
        assert TelemetryHourPack.objects.count() == 2 and GpuSample.objects.exists()

        def no_decoding(*args, **kwargs):
            raise AssertionError("a pack was decoded for an hour-wide bucket")

        monkeypatch.setattr(packing, "packed_columns", no_decoding)
        after = gpu_series(node.pk, since=since, until=NOW, gpu_count=8)
    for gpu in range(8):
        assert sum(row["n"] for row in after.gpus[gpu]) == sum(row["n"] for row in before.gpus[gpu]) == 300
        for name in ("temperature_max", "power_max"):
            assert max(r[name] for r in after.gpus[gpu]) == pytest.approx(max(r[name] for r in before.gpus[gpu]))
        weighted = [sum(r["power_avg"] * r["n"] for r in series.gpus[gpu]) for series in (before, after)]
        assert weighted[1] == pytest.approx(weighted[0], rel=1e-5)


def test_a_nodes_samples_read_the_same_packed_or_not(node):
    _ingest(node, T0, 150)
    span = {"since": T0 + timedelta(minutes=50), "until": T0 + timedelta(hours=1, minutes=10), "now": NOW}
    before = packing.samples(node.pk, **span)
    packing.pack_past_hours(now=T0 + timedelta(hours=1, minutes=20))
    assert TelemetryHourPack.objects.count() == 1 and GpuSample.objects.exists()  # half packed, half raw
    assert packing.samples(node.pk, **span) == before
    assert len(before) == 40 * 8
    assert packing.samples(node.pk, **span, gpu=2) == [s for s in before if s["gpu_index"] == 2]


def test_a_batch_of_several_nodes_recognises_a_resend_of_a_packed_hour(node):
    reports = _reports(node.hostname, T0, 120)
    with time_machine.travel(NOW, tick=False):
        ingest_reports(node.pk, reports)
        packing.pack_past_hours(now=NOW)
        with transaction.atomic():
            (result,) = ingest_many([(node.pk, reports[:3])])
    assert (result.accepted, result.duplicates) == (0, 3)
    assert not NodeReport.objects.exists()


def test_a_group_of_nodes_looks_up_their_packs_in_one_statement_each_node_its_own(node):
    # A group of late reports (agents flushing their buffers): one pack lookup for the group, and a
    # pack of one node never makes another node's report of the same instant a duplicate.
    other = NodeFactory()
    reports = _reports(node.hostname, T0, 120)
    with time_machine.travel(NOW, tick=False):
        ingest_reports(node.pk, reports)
        packing.pack_past_hours(now=NOW)
        theirs = _reports(other.hostname, T0, 3)  # the same instants as the packed ones, never sent
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            resent, new = ingest_many([(node.pk, reports[:3]), (other.pk, theirs)])
    assert (resent.accepted, resent.duplicates) == (0, 3)
    assert (new.accepted, new.duplicates) == (3, 0)
    lookups = [q["sql"] for q in queries if TelemetryHourPack._meta.db_table in q["sql"]]
    assert len(lookups) == (1 if connection.vendor == "postgresql" else 2), lookups  # SQLite: node by node


def test_the_steady_stream_looks_up_no_pack(node):
    with time_machine.travel(NOW, tick=False), transaction.atomic(), CaptureQueriesContext(connection) as queries:
        (result,) = ingest_many([(node.pk, _reports(node.hostname, NOW - timedelta(seconds=30), 1))])
    assert result.accepted == 1
    assert not [q for q in queries if TelemetryHourPack._meta.db_table in q["sql"]]


def test_a_packed_hour_is_read_from_its_pack_not_also_from_its_roll_up(node):
    _ingest(node, T0, 120)
    with time_machine.travel(NOW, tick=False):
        packing.pack_past_hours(now=NOW)
        series = gpu_series(node.pk, since=T0, until=NOW, gpu_count=8)
    assert sum(row["n"] for row in series.gpus[0]) == 120  # not 240


def test_trends_read_the_same_days_before_and_after_packing(node):
    # Busy every other report (100 % at 70 °C, else 70 % at 50 °C): raw samples count only the busy
    # ones, an hour's roll-up (85 % on average) all of them, so reading a packed hour twice shows.
    reports = []
    for i in range(240):
        report = make_report(node.hostname, collected_at=T0 + timedelta(seconds=30 * i), seed=i, seq=i)
        for gpu in report["gpus"]:
            gpu["utilization_pct"], gpu["temperature_c"] = (100.0, 70.0) if i % 2 else (70.0, 50.0)
            gpu["ecc_aggregate_corrected"] = i // 10
        reports.append(msgspec.convert(report, AgentReport))
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        ingest_reports(node.pk, reports)

    def days():
        from trends.collect import Batch

        batch = Batch()
        trend_telemetry(batch, node.pk, node.pk, T0 - timedelta(days=1), NOW)
        return {key: [(t, pytest.approx(v)) for t, v in values] for key, values in batch.series.items()}

    before = days()
    packing.pack_past_hours(now=NOW)
    assert TelemetryHourPack.objects.count() == 2

    def no_decoding(*args, **kwargs):
        raise AssertionError("the trends decoded a pack: they read its hour's roll-up")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing, "packed_columns", no_decoding)
        patch.setattr(packing, "packed_samples", no_decoding)
        assert days() == before
    assert before[(node.pk, "temperature_at_load")][0][1] == 70.0


# --- Retention --------------------------------------------------------------------------------


def test_retention_drops_packs_past_the_raw_window_and_keeps_their_roll_ups(node):
    _ingest(node, T0, 240)
    packing.pack_past_hours(now=NOW)
    result = roll_up_and_prune(now=T0 + timedelta(days=14, hours=1, minutes=5))
    assert result.deleted["telemetryhourpack"] == 1
    assert list(TelemetryHourPack.objects.values_list("hour", flat=True)) == [T0 + timedelta(hours=1)]
    assert GpuSampleHourly.objects.filter(node=node).count() == 16


def test_packs_are_kept_as_long_as_reports_when_reports_are_kept_longer(node):
    _ingest(node, T0, 120)
    packing.pack_past_hours(now=NOW)
    with override_settings(TELEMETRY_REPORT_RETENTION_DAYS=30):
        roll_up_and_prune(now=T0 + timedelta(days=20))
        assert TelemetryHourPack.objects.count() == 1
        roll_up_and_prune(now=T0 + timedelta(days=31))
        assert not TelemetryHourPack.objects.exists()


def test_old_hours_are_read_from_roll_ups_once_out_of_the_raw_window(node):
    _ingest(node, T0, 120)
    packing.pack_past_hours(now=NOW)
    later = T0 + timedelta(days=14, hours=2)
    with time_machine.travel(later, tick=False):
        series = gpu_series(node.pk, since=T0, until=later, gpu_count=8)  # the pack is still there
    assert sum(row["n"] for row in series.gpus[0]) == 120
    assert datetime(2026, 11, 20, tzinfo=UTC) <= series.gpus[0][0]["t"]
