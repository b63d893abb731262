"""telemetry.ingest.ingest_reports: history vs latest state, order, XIDs, rules, query count."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import msgspec
import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from telemetry import consumers, store
from telemetry.ingest import ingest_reports, normalise_bus_id
from telemetry.models import GpuSample, GpuState, IngestRejection, NodeHealth, NodeReport, XidRecord
from telemetry.schema import AgentReport, GpuReading
from telemetry.testing import make_batch, make_report, make_xid

from .conftest import T0

pytestmark = pytest.mark.django_db


def reports(*dicts) -> list[AgentReport]:
    return [msgspec.convert(d, AgentReport) for d in dicts]


def batch(hostname: str, **kwargs) -> list[AgentReport]:
    return reports(*make_batch(hostname, **kwargs)["reports"])


def test_gpu_state_has_a_column_for_every_gpu_reading_field():
    columns = {f.name for f in GpuState._meta.fields}
    assert set(store.GPU_READ_COLUMNS) <= columns  # GpuReading's fields


def test_a_reading_s_fields_are_the_staging_columns_in_their_order():
    # store._reading_values: a staged row is a reading's values as one tuple (msgspec's astuple, in C),
    # which holds only while the struct's fields are GpuState's columns in GpuState's order.
    assert GpuReading.__struct_fields__ == store.GPU_READING_COLUMNS
    assert store._reading_values is msgspec.structs.astuple


def test_it_keeps_every_report_in_history_and_only_the_newest_as_latest_state(node):
    ingest_reports(node.pk, batch(node.hostname, start=T0, count=3, every_s=30))
    assert NodeReport.objects.filter(node=node).count() == 3
    assert GpuSample.objects.filter(node=node).count() == 24
    health = NodeHealth.objects.get(node=node)
    newest = T0 + timedelta(seconds=60)
    assert health.last_report_at == newest
    assert set(GpuState.objects.filter(node=node).values_list("updated_at", flat=True)) == {newest}
    assert health.gpu_count == 8 and health.driver_version == "580.105.08"
    assert len(health.ib_ports) == 8 and health.host["edac_uncorrected"] == 0


def test_latest_gpu_state_carries_the_newest_reports_values(node):
    newest = make_report(node.hostname, collected_at=T0 + timedelta(seconds=30), seed=7)
    newest["gpus"][5]["ecc_volatile_uncorrected"] = 2
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0), newest))
    gpu5 = GpuState.objects.get(node=node, index=5)
    assert gpu5.ecc_volatile_uncorrected == 2
    assert gpu5.temperature_c == newest["gpus"][5]["temperature_c"]
    assert gpu5.uuid == newest["gpus"][5]["uuid"]


def test_a_late_batch_goes_to_history_without_rolling_latest_state_back(node):
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0 + timedelta(hours=1), seed=1)))
    current = GpuState.objects.get(node=node, index=0).temperature_c
    # An agent flushing its buffer after an outage: older reports, newest last.
    late = batch(node.hostname, start=T0, count=5, seed=50)
    result = ingest_reports(node.pk, late)
    assert result.accepted == 5
    assert NodeReport.objects.filter(node=node).count() == 6
    health = NodeHealth.objects.get(node=node)
    assert health.last_report_at == T0 + timedelta(hours=1)
    assert GpuState.objects.get(node=node, index=0).temperature_c == current
    assert health.last_received_at >= health.last_report_at  # it did hear from the node


def test_gpu_compute_processes_sums_the_gpus_and_is_unknown_when_one_gpu_is(node):
    report = make_report(node.hostname, collected_at=T0)
    for g in report["gpus"]:
        g["compute_processes"] = 2
    ingest_reports(node.pk, reports(report))
    assert NodeHealth.objects.get(node=node).gpu_compute_processes == 16
    later = make_report(node.hostname, collected_at=T0 + timedelta(seconds=30))
    later["gpus"][3]["compute_processes"] = None
    ingest_reports(node.pk, reports(later))
    assert NodeHealth.objects.get(node=node).gpu_compute_processes is None


def test_bus_ids_from_nvml_and_the_kernel_log_normalise_alike():
    assert normalise_bus_id("00000000:53:00.0") == normalise_bus_id("0000:53:00") == "0000:53:00"
    assert normalise_bus_id("00000000:B9:00.0") == normalise_bus_id("0000:b9:00")
    assert normalise_bus_id("garbage") is None


def test_it_records_xids_with_the_gpu_resolved_from_the_kernel_bus_id(node):
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0, xid=79, xid_gpu=3)))
    record = XidRecord.objects.get(node=node)
    assert (record.xid, record.gpu_index, record.kind) == (79, 3, "xid")
    assert record.raw.startswith("NVRM: Xid (PCI:0000:5d:00): 79")


def test_it_resolves_an_xid_from_a_report_without_gpus_through_the_latest_state(node):
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0)))
    lonely = make_report(node.hostname, collected_at=T0 + timedelta(seconds=30), gpus=0)
    lonely["xid_events"] = [make_xid(79, gpu=6, observed_at=T0 + timedelta(seconds=29))]
    ingest_reports(node.pk, reports(lonely))
    assert XidRecord.objects.get(node=node).gpu_index == 6


def test_the_same_kernel_line_sent_in_two_reports_is_stored_once(node):
    line = make_xid(48, gpu=1, observed_at=T0, kmsg_seq=77)
    first = make_report(node.hostname, collected_at=T0)
    second = make_report(node.hostname, collected_at=T0 + timedelta(seconds=30))
    first["xid_events"] = second["xid_events"] = [line]
    ingest_reports(node.pk, reports(first, second))
    assert XidRecord.objects.filter(node=node).count() == 1


@pytest.fixture
def evaluated(monkeypatch):
    """The contexts handed to the report consumer (health.evaluation.evaluate_reports). A stand-in: the real rules
    are another engineer's work and are a placeholder in this checkout."""
    seen: list = []
    monkeypatch.setattr(
        consumers, "CONSUMER", replace(consumers.CONSUMER, evaluate=lambda contexts, **_: seen.extend(contexts))
    )
    return seen


def test_health_rules_are_the_declared_consumer_of_ingested_reports():
    # Telemetry sits below health and never imports it: health registers its rules at start-up.
    from health.evaluation import OPEN_ALERT_FIELDS, evaluate_reports
    from health.models import Alert

    assert consumers.CONSUMER.evaluate is evaluate_reports
    assert consumers.CONSUMER.read_with_node == consumers.NodeRows(Alert, OPEN_ALERT_FIELDS, "state", "firing")


def test_each_new_report_is_evaluated_with_the_state_just_before_it(node, evaluated):
    first_report = make_report(node.hostname, collected_at=T0, seed=1)
    ingest_reports(node.pk, reports(first_report))
    assert evaluated[0].previous_report_at is None and evaluated[0].previous_gpus == {}
    evaluated.clear()
    ingest_reports(node.pk, batch(node.hostname, start=T0 + timedelta(seconds=30), count=2, seed=5))
    first, second = evaluated
    assert first.previous_report_at == T0
    assert first.previous_gpus[0].temperature_c == first_report["gpus"][0]["temperature_c"]
    assert second.previous_gpus[0].temperature_c == first.report.gpus[0].temperature_c
    assert first.previous_ib_ports[("mlx5_0", 1)]["state"] == "ACTIVE"
    assert first.previous_host["edac_uncorrected"] == 0
    assert second.previous_report_at == first.report.collected_at
    assert (second.expected_gpu_count, second.hostname, second.source) == (8, node.hostname, "agent")


def test_duplicates_are_not_evaluated_again(node, evaluated):
    body = batch(node.hostname, start=T0, count=2)
    ingest_reports(node.pk, body)
    evaluated.clear()
    ingest_reports(node.pk, body)
    assert evaluated == []


def test_a_failing_rule_keeps_the_telemetry_and_leaves_a_rejection_to_find(node, monkeypatch):
    def broken_rules(contexts, **_):  # stand-in for a rule with a bug (the real rules are not here yet)
        NodeReport.objects.filter(node=node).delete()  # whatever it wrote must be rolled back
        raise ZeroDivisionError("rule bug")

    monkeypatch.setattr(consumers, "CONSUMER", replace(consumers.CONSUMER, evaluate=broken_rules))
    result = ingest_reports(node.pk, batch(node.hostname, start=T0, count=2))
    assert result.accepted == 2
    assert NodeReport.objects.filter(node=node).count() == 2
    rejection = IngestRejection.objects.get()
    assert rejection.reason.startswith("evaluation error: ZeroDivisionError")
    assert rejection.node_id == node.pk


def test_a_quiet_batch_costs_the_rules_no_call_and_a_failing_quiet_check_falls_back_to_them(node, monkeypatch):
    seen: list = []

    def broken(contexts, **_):
        raise RuntimeError("quiet check bug")

    for quiet, evaluated in ((lambda contexts, **_: True, 0), (broken, 1)):
        seen.clear()

        def evaluate(contexts, **_):
            seen.extend(contexts)

        evaluate.quiet = quiet  # what the consumer's evaluate says of itself (consumers.quiet_of)
        monkeypatch.setattr(consumers, "CONSUMER", replace(consumers.CONSUMER, evaluate=evaluate))
        start = T0 + timedelta(minutes=len(seen) + evaluated)
        assert ingest_reports(node.pk, batch(node.hostname, start=start, seed=evaluated)).accepted == 1
        assert len(seen) == evaluated


def _queries_for(node, count: int, start, *, late: timedelta = timedelta(minutes=1)) -> int:
    # Received ``late`` after the batch's last report: the steady stream, unless told otherwise.
    with (
        time_machine.travel(start + timedelta(seconds=30 * count) + late, tick=False),
        CaptureQueriesContext(connection) as ctx,
    ):
        ingest_reports(node.pk, batch(node.hostname, start=start, count=count, seed=count))
    return len(ctx.captured_queries)


def test_the_number_of_queries_does_not_grow_with_the_batch(node):
    _queries_for(node, 1, T0)  # the node's first report writes the same statements, warm it up anyway
    one = _queries_for(node, 1, T0 + timedelta(hours=1))
    fifty = _queries_for(node, 50, T0 + timedelta(hours=2))
    assert one == fifty
    assert fifty <= 11  # SQLite; on PostgreSQL far fewer, see test_ingest_round_trips


def test_reports_of_an_hour_the_packing_beat_may_have_reached_cost_one_lookup_more(node):
    # A resend of a packed hour is a duplicate (telemetry.packing): its hour's pack is read once.
    _queries_for(node, 1, T0)
    steady = _queries_for(node, 50, T0 + timedelta(hours=1))
    late = _queries_for(node, 50, T0 + timedelta(hours=2), late=timedelta(hours=3))
    assert late == steady + 1


def test_on_postgresql_gpu_samples_go_in_with_copy(node):
    if connection.vendor != "postgresql":
        pytest.skip("COPY is the PostgreSQL path; bin/test runs this on PostgreSQL")
    with CaptureQueriesContext(connection) as ctx:
        ingest_reports(node.pk, batch(node.hostname, start=T0, count=20))
    sql = " ".join(q["sql"] for q in ctx.captured_queries)
    assert "telemetry_gpusample" not in sql  # COPY bypasses the query log: no INSERT for samples
    assert GpuSample.objects.filter(node=node).count() == 160
    assert GpuSample.objects.get(node=node, gpu_index=2, collected_at=T0).remapped_rows_pending is False


def test_a_late_report_is_evaluated_without_newer_state_posing_as_its_past(node, evaluated):
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0 + timedelta(hours=1))))
    evaluated.clear()
    ingest_reports(node.pk, reports(make_report(node.hostname, collected_at=T0, xid=79)))
    (late,) = evaluated
    assert late.report.xid_events[0].xid == 79  # still evaluated: a buffered XID is still an XID
    assert late.previous_report_at is None and late.previous_gpus == {}
