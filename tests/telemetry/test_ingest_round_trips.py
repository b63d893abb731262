"""Round trips of the ingest: a single-report request on PostgreSQL is one read and one write
(plus the COPY of its GPU rows), and each shortcut behaves exactly as the long way did."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import msgspec
import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from health.evaluation import OPEN_ALERT_FIELDS
from health.models import Alert, Finding
from telemetry import consumers, store
from telemetry.groupcommit import ingest_group
from telemetry.ingest import ingest_many, ingest_reports
from telemetry.models import GpuSample, GpuState, IngestRejection, NodeHealth, NodeReport
from telemetry.schema import AgentReport, GpuReading
from telemetry.testing import make_report
from tests.factories import NodeFactory

from .conftest import T0, race_an_open_transaction

pytestmark = pytest.mark.django_db


def one(node, at, **kwargs) -> list[AgentReport]:
    return [msgspec.convert(make_report(node.hostname, collected_at=at, **kwargs), AgentReport)]


def postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement read and write are PostgreSQL's; bin/test runs this on PostgreSQL")


def test_on_postgresql_a_healthy_report_is_one_read_and_one_write(node):
    postgresql_only()
    # The steady stream: received as sent (a report of an hour already packed costs one lookup more).
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        ingest_reports(node.pk, one(node, T0))
        with CaptureQueriesContext(connection) as queries:
            result = ingest_reports(node.pk, one(node, T0 + timedelta(seconds=30), seed=2))
    assert result.accepted == 1
    sql = [q["sql"] for q in queries]
    # ingest's own atomic block, a savepoint inside the test's transaction (BEGIN in production)
    assert sum(s.startswith("SAVEPOINT") for s in sql) == 1, sql  # the rules touched nothing: no other
    work = [s for s in sql if not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    assert len(work) == 2, work  # the GPU rows' COPY is not in the query log


def test_the_one_statement_read_gives_what_the_orm_gives(node):
    postgresql_only()
    ingest_reports(node.pk, one(node, T0, xid=79))  # fires an alert: there is one to read
    snapshot = store.read_node(node.pk, consumers.CONSUMER.read_with_node)

    orm_gpus = [
        GpuReading(*row)
        for row in GpuState.objects.filter(node=node).order_by("index").values_list(*store.GPU_READ_COLUMNS)
    ]
    assert snapshot.gpus == orm_gpus
    assert [[type(v) for v in msgspec.structs.astuple(g)] for g in snapshot.gpus] == [
        [type(v) for v in msgspec.structs.astuple(g)] for g in orm_gpus
    ]  # 45.0 stays a float, not the JSON 45
    (orm_node,) = type(node).objects.filter(pk=node.pk).values_list(*store.NODE_COLUMNS)
    assert snapshot.node == dict(zip(store.NODE_COLUMNS, orm_node, strict=True))
    assert snapshot.extra == list(Alert.objects.filter(node=node, state="firing").values_list(*OPEN_ALERT_FIELDS))
    assert snapshot.extra  # the XID 79 alert
    assert store.read_node(NodeFactory().pk + 1000) is None


def test_the_read_of_a_group_gives_what_the_read_of_each_node_gives(node):
    # telemetry.groupcommit reads a group's nodes at once: the same snapshots as one node at a time,
    # for a node with a firing alert, one with reports, one that never reported and one that is gone.
    postgresql_only()
    quiet, silent = NodeFactory(), NodeFactory()
    ingest_reports(node.pk, one(node, T0, xid=79))
    ingest_reports(quiet.pk, one(quiet, T0, seed=3))
    GpuState.objects.create(node=silent, index=0, uuid="GPU-left-over", updated_at=T0)  # not a previous state
    firing = consumers.CONSUMER.read_with_node
    ids = [node.pk, quiet.pk, silent.pk, silent.pk + 1000]
    group = store.read_nodes(ids, firing)
    assert group == {i: store.read_node(i, firing) for i in ids[:2]} | {
        silent.pk: replace(store.read_node(silent.pk, firing), gpus=[])
    }
    assert len(group[quiet.pk].gpus) == 8 and group[node.pk].extra
    assert [g.index for g in group[node.pk].gpus] == sorted(g.index for g in group[node.pk].gpus)


def test_the_open_alert_fields_are_in_the_alert_models_own_order():
    order = [f.attname for f in Alert._meta.concrete_fields]
    assert list(OPEN_ALERT_FIELDS) == sorted(OPEN_ALERT_FIELDS, key=order.index)


def test_a_resent_newest_report_leaves_the_latest_rows_to_the_newest_new_one(node):
    ingest_reports(node.pk, one(node, T0 + timedelta(minutes=1), seed=1))
    before = NodeHealth.objects.get(node=node)
    gpus_before = list(GpuState.objects.filter(node=node).values_list("index", "updated_at", "temperature_c"))
    # An older report and the newest one again: only the older one is new.
    batch = one(node, T0, seed=7) + one(node, T0 + timedelta(minutes=1), seed=1)
    result = ingest_reports(node.pk, batch)

    assert (result.accepted, result.duplicates) == (1, 1)
    after = NodeHealth.objects.get(node=node)
    assert after.last_report_at == T0 + timedelta(minutes=1)  # not rolled back to the older report
    assert after.last_received_at > before.last_received_at  # but the node is alive
    assert list(GpuState.objects.filter(node=node).values_list("index", "updated_at", "temperature_c")) == gpus_before


def test_a_group_writes_each_health_row_from_its_newest_new_report(node):
    # store.insert_new_reports_of_nodes: the health rows go without their JSON columns and take
    # them from the newest new report's stored summary, in the reports' own statement.
    postgresql_only()
    plain, late = NodeFactory(), NodeFactory()
    ingest_reports(late.pk, one(late, T0 + timedelta(minutes=1), seed=1))
    stored = NodeHealth.objects.get(node=late)
    first = one(node, T0, seed=3)[0]
    newest = msgspec.structs.replace(
        one(node, T0 + timedelta(seconds=30), seed=4)[0], host=None, collector_errors={"dcgm": "timeout"}
    )
    only = one(plain, T0, seed=5)[0]
    older, resent = one(late, T0, seed=7), one(late, T0 + timedelta(minutes=1), seed=1)
    with transaction.atomic():
        outcomes = ingest_many([(node.pk, [newest, first]), (plain.pk, [only]), (late.pk, older + resent)])
    assert [(o.accepted, o.duplicates) for o in outcomes] == [(2, 0), (1, 0), (1, 1)]

    health = NodeHealth.objects.get(node=node)
    assert health.last_report_at == newest.collected_at  # the newest, though it came first
    assert health.host == {}  # a report without host vitals: {}, as _health_row stores it
    assert health.ib_ports == msgspec.to_builtins(newest.ib_ports)
    assert health.collector_errors == {"dcgm": "timeout"}
    assert (health.agent_version, health.cuda_version, health.gpu_count) == ("0.1.0", "13.0", 8)
    health = NodeHealth.objects.get(node=plain)
    assert (health.host, health.ib_ports) == (msgspec.to_builtins(only.host), msgspec.to_builtins(only.ib_ports))
    assert health.host  # make_report's host vitals: the test compares something
    kept = NodeHealth.objects.get(node=late)  # its only new report is older than the one stored
    assert (kept.last_report_at, kept.host, kept.ib_ports) == (stored.last_report_at, stored.host, stored.ib_ports)
    assert kept.last_received_at > stored.last_received_at  # but the node is alive


def test_a_single_request_writes_its_health_row_from_its_newest_report(node):
    # store.insert_reports_with_latest: the same road for the JSON columns as a group's
    # (_health_from_reports), joined to the newest report only if it was new.
    postgresql_only()
    ingest_reports(node.pk, one(node, T0 + timedelta(minutes=1), seed=1))
    stored = NodeHealth.objects.get(node=node)
    newest = msgspec.structs.replace(
        one(node, T0 + timedelta(minutes=2), seed=4)[0], host=None, collector_errors={"dcgm": "timeout"}
    )
    assert ingest_reports(node.pk, [newest]).accepted == 1
    health = NodeHealth.objects.get(node=node)
    assert (health.last_report_at, health.host) == (newest.collected_at, {})
    assert health.ib_ports == msgspec.to_builtins(newest.ib_ports)
    assert health.collector_errors == {"dcgm": "timeout"}
    assert stored.host  # the first report's host vitals were there to be replaced
    older = one(node, T0, seed=7)  # new, but older than the stored state: the JSON stays
    assert ingest_reports(node.pk, older).accepted == 1
    kept = NodeHealth.objects.get(node=node)
    assert (kept.last_report_at, kept.host, kept.collector_errors) == (newest.collected_at, {}, {"dcgm": "timeout"})


def test_a_resent_report_writes_no_latest_rows(node):
    ingest_reports(node.pk, one(node, T0, seed=1))
    before = NodeHealth.objects.get(node=node).last_received_at
    result = ingest_reports(node.pk, one(node, T0, seed=1))
    assert (result.accepted, result.duplicates) == (0, 1)
    assert NodeHealth.objects.get(node=node).last_received_at == before


def test_a_failure_after_a_finding_rolls_the_finding_back_and_keeps_the_telemetry(
    node, monkeypatch, django_capture_on_commit_callbacks
):
    from health import evaluation

    def fail(ctx, open_alerts):  # stand-in for a bug after the rules wrote their finding
        assert Finding.objects.filter(node=node).exists()
        raise ZeroDivisionError("bug after the finding")

    monkeypatch.setattr(evaluation, "_clear_heartbeat", fail)
    with django_capture_on_commit_callbacks() as callbacks:
        result = ingest_reports(node.pk, one(node, T0, xid=79))

    assert result.accepted == 1 and NodeReport.objects.filter(node=node).count() == 1
    assert not Finding.objects.filter(node=node).exists() and not Alert.objects.filter(node=node).exists()
    assert IngestRejection.objects.get().reason.startswith("evaluation error: ZeroDivisionError")
    assert callbacks == []  # the finding's follow-ups went with it


def test_the_lazy_savepoint_sends_nothing_for_a_block_without_statements(db):
    with transaction.atomic(), CaptureQueriesContext(connection) as queries, store.savepoint_on_first_statement():
        pass
    assert queries.captured_queries == []


def test_the_lazy_savepoint_rolls_back_a_first_statement_made_inside_an_inner_block(node):
    NodeReport.objects.create(node=node, collected_at=T0, report_id="r1", received_at=T0, summary={})
    with transaction.atomic():
        # The block is the specification: what it does before it raises is what must roll back.
        with pytest.raises(ZeroDivisionError), store.savepoint_on_first_statement():  # noqa: PT012
            NodeReport.objects.filter(node=node).delete()  # the first statement, in delete's own atomic block
            transaction.on_commit(lambda: pytest.fail("a rolled back block's callback ran"))
            raise ZeroDivisionError
        assert NodeReport.objects.filter(node=node).count() == 1  # the transaction is still usable
        assert connection.run_on_commit == []


def test_the_lazy_savepoint_drops_callbacks_of_a_failed_block_without_statements(db):
    with transaction.atomic():
        # The block is the specification: what it does before it raises is what must roll back.
        with pytest.raises(ZeroDivisionError), store.savepoint_on_first_statement():  # noqa: PT012
            transaction.on_commit(lambda: pytest.fail("a rolled back block's callback ran"))
            raise ZeroDivisionError
        assert connection.run_on_commit == []


def test_the_lazy_savepoint_keeps_the_writes_of_a_block_that_succeeds(node):
    with transaction.atomic():
        savepoints = list(connection.savepoint_ids)
        with store.savepoint_on_first_statement():
            transaction.on_commit(lambda: None)
            NodeReport.objects.create(node=node, collected_at=T0, report_id="r1", received_at=T0, summary={})
        assert NodeReport.objects.filter(node=node).count() == 1
        assert len(connection.run_on_commit) == 1 and connection.savepoint_ids == savepoints


def test_gpu_rows_are_updated_in_place_with_no_index_to_touch(db):
    # Every report rewrites its node's GPU rows: no index on a column that changes, and room in
    # the pages (migration 0012), so that PostgreSQL's update is a HOT one.
    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, GpuState._meta.db_table)
    indexed = sorted(tuple(c["columns"]) for c in indexes.values() if c["index"] or c["unique"] or c["primary_key"])
    assert indexed == [("id",), ("node_id", "index")]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [GpuState._meta.db_table])
            assert cursor.fetchone()[0] == ["fillfactor=50"]


def test_health_rows_are_updated_in_place_with_no_index_to_touch(db):
    # Every report rewrites its node's health row: no index but the primary key, and room in the
    # pages (migration 0015), so that PostgreSQL's update is a HOT one.
    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, NodeHealth._meta.db_table)
    indexed = sorted(tuple(c["columns"]) for c in indexes.values() if c["index"] or c["unique"] or c["primary_key"])
    assert indexed == [("node_id",)]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [NodeHealth._meta.db_table])
            assert "fillfactor=50" in cursor.fetchone()[0]


def test_rows_go_to_postgresql_as_a_parameter_not_spliced_into_the_sql(node):
    # telemetry.store.bound_cursor: the JSON text of the rows is a bound parameter, which
    # PostgreSQL's parser never scans and Python never escapes (bench/ingest.py's CPU per report).
    postgresql_only()
    report = one(node, T0)
    with CaptureQueriesContext(connection) as queries:
        ingest_reports(node.pk, report)
    (write,) = [q["sql"] for q in queries if "telemetry_nodereport" in q["sql"]]
    assert report[0].report_id not in write and "$1" in write, write[:300]


def test_the_hot_statements_are_prepared_once_per_connection(node):
    # telemetry.store.bound_cursor: outside the query log (production) the ingest's own statements
    # are prepared on their first run, and later reports reuse them rather than planning again.
    postgresql_only()
    ingest_reports(node.pk, one(node, T0))
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        first = {row[0] for row in cursor.fetchall()}
    ingest_reports(node.pk, one(node, T0 + timedelta(seconds=30), seed=2))
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        after = {row[0] for row in cursor.fetchall()}
    assert any("telemetry_nodereport" in s for s in first), first
    assert any("telemetry_gpustate" in s for s in first), first
    assert not any("row_to_json" in s for s in first), first  # reads are planned each time, with fresh statistics
    assert after == first  # the second report planned nothing new
    assert NodeReport.objects.filter(node=node).count() == 2


def test_latest_gpu_rows_hold_every_field_the_agent_sent_or_left_at_its_default(node):
    # telemetry.store.NodeGpus: the readings go to PostgreSQL as the agent's structs encode them,
    # which leave out fields at their default; each column must still get the reading's value.
    sent = make_report(node.hostname, collected_at=T0, gpus=2)
    bare = {"index": 1, "uuid": "GPU-bare"}  # everything else at its default (pci_bus_id "", name "", None)
    sent["gpus"][1] = bare
    report = msgspec.convert(sent, AgentReport)
    ingest_reports(node.pk, [report])
    for reading in report.gpus:
        stored = GpuState.objects.get(node=node, index=reading.index)
        for name, value in msgspec.structs.asdict(reading).items():
            assert getattr(stored, name) == value, (reading.index, name)
        assert stored.updated_at == T0
    assert GpuState.objects.get(node=node, index=1).pci_bus_id == ""


def test_report_and_health_rows_are_not_compressed_on_write(node):
    # Migration 0014: about 2 kB of jsonb each, over PostgreSQL's default TOAST threshold; pglz on
    # every report was 2.4 % of PostgreSQL's CPU for rows that live an hour or one per node.
    postgresql_only()
    ingest_reports(node.pk, one(node, T0))
    with connection.cursor() as cursor:
        for table in ("telemetry_nodereport", "telemetry_nodehealth"):
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
            assert "toast_tuple_target=8160" in (cursor.fetchone()[0] or []), table
        cursor.execute("SELECT pg_column_compression(summary) FROM telemetry_nodereport WHERE node_id = %s", [node.pk])
        assert cursor.fetchone()[0] is None  # stored as it came


def test_a_group_s_gpu_rows_are_staged_and_upserted_once_per_round(node):
    # telemetry.store.upsert_gpu_states on PostgreSQL: binary COPY into a temporary table, upsert
    # from it. groupcommit runs several rounds in one transaction (a node's second request is the
    # next round): each round's rows must leave the table, or the next upsert would meet them again.
    postgresql_only()
    other = NodeFactory()
    first = [(node.pk, one(node, T0)), (other.pk, one(other, T0, seed=5))]
    later = one(node, T0 + timedelta(seconds=30), seed=7)
    with transaction.atomic():
        assert all(r.accepted == 1 for r in ingest_many(first))
        assert ingest_many([(node.pk, later)])[0].accepted == 1
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {store.GPU_STAGING_TABLE}")  # noqa: S608 - a constant
            assert cursor.fetchone()[0] == 0
    for n, report in ((node, later[0]), (other, first[1][1][0])):
        for reading in report.gpus:
            stored = GpuState.objects.get(node=n, index=reading.index)
            assert stored.updated_at == report.collected_at
            for name, value in msgspec.structs.asdict(reading).items():
                assert getattr(stored, name) == value, (n.pk, reading.index, name)


@pytest.mark.django_db(transaction=True)
def test_a_group_whose_new_gpu_row_another_transaction_inserts_meanwhile_is_stored_alone(node):
    # A group writes its latest GPU rows by MERGE (telemetry.store._gpu_staging): a row it finds
    # missing, which another transaction inserts and commits meanwhile, fails the group with a
    # unique violation. groupcommit then ingests the request alone (ON CONFLICT): stored all the same.
    postgresql_only()
    report = one(node, T0 + timedelta(seconds=30), seed=4)
    results: list = []
    errors = race_an_open_transaction(
        lambda: GpuState.objects.create(node=node, index=0, uuid="GPU-before", updated_at=T0),
        lambda: results.extend(ingest_group([(node.pk, report)], source="agent")),
        "the group's insert of GPU 0 must wait for the other transaction",
    )
    assert not errors, errors
    assert [r.accepted for r in results] == [1]
    gpus = {g.index: g for g in GpuState.objects.filter(node=node)}
    assert sorted(gpus) == [g.index for g in report[0].gpus]
    assert (gpus[0].updated_at, gpus[0].uuid) == (report[0].collected_at, report[0].gpus[0].uuid)
    assert NodeReport.objects.filter(node=node).count() == 1


def test_a_group_s_prepared_statements_find_rows_by_their_keys_on_a_fresh_database(node):
    # Prepared once per connection, a statement keeps the plan it got first: on a fresh database's
    # small tables the MERGE's was a hash join over a scan of all of GpuState, kept as the fleet grew.
    postgresql_only()
    extra = consumers.CONSUMER.read_with_node
    read = store._node_read_sql(extra, many=True)
    with transaction.atomic(), store.bound_cursor() as cursor, store._planned_by_keys(cursor):
        cursor.execute("EXPLAIN " + read, [extra.state, f"{{{node.pk}}}", "{NULL}", "{NULL}"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Seq Scan" not in plan and "Hash" not in plan, plan
        cursor.execute("EXPLAIN " + store._gpu_rows_sql(), [f"{{{node.pk}}}"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Index Scan using gpustate_node_index" in plan and "Seq Scan" not in plan, plan
    staging = store._sql().gpu_staging
    readings = [store.NodeGpus(node.pk, T0, one(node, T0)[0].gpus)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_hashjoin = on")
        store._stage_gpus(cursor, staging, readings)
        with store._planned_by_keys(cursor):
            cursor.execute("EXPLAIN " + staging.upsert_and_sample)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Index Scan using gpustate_node_index on telemetry_gpustate" in plan, plan
        assert "Seq Scan on telemetry_gpustate" not in plan, plan
        assert "Hash" not in plan, plan
        cursor.execute(f"DELETE FROM {store.GPU_STAGING_TABLE}")  # noqa: S608 - a constant; only explained
    with transaction.atomic():
        store.read_nodes([node.pk], extra)
        store.store_gpu_readings([store.NodeGpus(node.pk, T0, one(node, T0)[0].gpus)])
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in store._JOINS))
            after = cursor.fetchone()
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in store._JOINS))
        assert after == cursor.fetchone()  # as they were before the group's statement
    assert GpuState.objects.filter(node=node).count() == len(readings[0].gpus)


def _samples(node) -> list[tuple]:
    fields = ("collected_at", "gpu_index", *store.SAMPLE_FIELDS)
    return list(GpuSample.objects.filter(node=node).order_by("collected_at", "gpu_index").values_list(*fields))


def test_a_group_samples_every_new_report_and_moves_the_latest_rows_only_forward(node):
    # telemetry.store.store_gpu_readings: a group's readings are staged once; every new report's
    # become GpuSample rows (GpuSample's narrower columns by PostgreSQL's casts) and the newest
    # report's the latest GPU rows, unless the node already sent a newer one.
    late, single = NodeFactory(), NodeFactory()
    ingest_reports(late.pk, one(late, T0 + timedelta(minutes=5), seed=9))
    ahead = {g.index: g.updated_at for g in GpuState.objects.filter(node=late)}
    batch = [*one(node, T0, seed=3), *one(node, T0 + timedelta(seconds=30), seed=4)]
    with transaction.atomic():
        outcomes = ingest_many([(node.pk, batch), (late.pk, [*one(late, T0, seed=3)])])
    assert [o.accepted for o in outcomes] == [2, 1]
    ingest_reports(single.pk, batch)  # the single request's road: its own COPY of the samples
    assert len(_samples(node)) == 2 * len(batch[0].gpus)
    assert _samples(node) == _samples(single)  # the same values, however they went in
    for reading in batch[1].gpus:
        stored = GpuState.objects.get(node=node, index=reading.index)
        assert (stored.updated_at, stored.temperature_c) == (batch[1].collected_at, reading.temperature_c)
    assert {g.index: g.updated_at for g in GpuState.objects.filter(node=late)} == ahead  # not rolled back
    assert [at for at, *_ in _samples(late)].count(T0) == len(batch[0].gpus)  # but its samples are kept
