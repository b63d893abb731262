"""Group commit (telemetry.groupcommit): concurrent agent requests share one transaction, and each
is answered with its own outcome only after that transaction's commit; a full queue answers 503.

These tests commit for real (``transaction=True``): the writer thread has its own connection and
sees only committed rows, as in production.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connection
from django.test import override_settings

from health.models import Finding
from nodes.services import Actor
from telemetry import groupcommit
from telemetry.ingest import IngestRefused
from telemetry.models import GpuSample, NodeHealth, NodeReport, XidRecord
from telemetry.schema import decode_batch
from telemetry.services import issue_agent_token
from telemetry.testing import make_batch, make_report
from tests.conftest import own_ingest_committer
from tests.factories import NodeFactory

from .conftest import T0, AgentClient

pytestmark = pytest.mark.django_db(transaction=True)


def reports_of(hostname: str, *, start: Any = T0, count: int = 1) -> list[Any]:

    return decode_batch(json.dumps(make_batch(hostname, start=start, count=count)).encode())


def request(node: Any, reports: list[Any]) -> groupcommit._Request:
    return groupcommit._Request(node.pk, reports, "agent", done=threading.Event())


@pytest.fixture
def committer():
    """This test's own committer (tests/conftest.py), whose writers end (and close their connections) with it."""
    return groupcommit.COMMITTER


@pytest.fixture
def nodes():
    return [NodeFactory(hostname=f"gpu-g-{i:03d}") for i in range(3)]


def test_each_request_of_a_group_gets_its_own_result(nodes):
    a, b = reports_of(nodes[0].hostname, count=2), reports_of(nodes[1].hostname)
    c = reports_of(nodes[0].hostname, start=T0 + timedelta(minutes=5))
    # The same node three times: a resend within the group is a duplicate, a later report is new.
    group = [request(nodes[0], a), request(nodes[1], b), request(nodes[0], a[:1]), request(nodes[0], c)]
    groupcommit.commit_group(group)
    assert [(r.result.accepted, r.result.duplicates) for r in group] == [(2, 0), (1, 0), (0, 1), (1, 0)]
    assert all(r.done.is_set() and r.error is None for r in group)
    assert NodeReport.objects.count() == 4
    health = NodeHealth.objects.get(node=nodes[0])
    assert health.last_report_at == c[0].collected_at  # the latest state moved with the newest report
    assert GpuSample.objects.filter(node=nodes[1]).count() == len(b[0].gpus)


def test_a_group_runs_the_rules_and_answers_an_xid_with_its_finding_committed(nodes):
    report = make_report(nodes[0].hostname, collected_at=T0, gpus=8)
    report["xid_events"] = [
        {
            "xid": 79,
            "observed_at": T0.isoformat(),
            "raw": "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            "pci_bus_id": "0000:18:00",
            "message": "GPU has fallen off the bus.",
        }
    ]

    xid = decode_batch(json.dumps({"reports": [report]}).encode())
    group = [request(nodes[0], xid), request(nodes[1], reports_of(nodes[1].hostname))]
    groupcommit.commit_group(group)
    assert group[0].result.accepted == 1
    assert XidRecord.objects.filter(node=nodes[0], xid=79).count() == 1
    assert Finding.objects.filter(node=nodes[0]).exists()  # committed before the request learns of it
    assert not Finding.objects.filter(node=nodes[1]).exists()


def test_a_refused_request_fails_only_itself(nodes):
    future = reports_of(nodes[1].hostname, start=T0 + timedelta(days=3650))  # the node's clock is wrong
    group = [request(nodes[0], reports_of(nodes[0].hostname)), request(nodes[1], future)]
    groupcommit.commit_group(group)
    assert group[0].result.accepted == 1
    assert isinstance(group[1].error, IngestRefused) and group[1].result is None
    assert NodeReport.objects.count() == 1


def test_a_request_for_a_deleted_node_fails_only_itself(nodes):
    group = [request(node, reports_of(node.hostname)) for node in nodes]
    nodes[1].delete()
    groupcommit.commit_group(group)
    assert type(group[1].error).__name__ == "DoesNotExist"
    assert [group[0].result.accepted, group[2].result.accepted] == [1, 1]
    assert NodeReport.objects.count() == 2


def postgresql_only(why: str) -> None:
    if connection.vendor != "postgresql":
        pytest.skip(f"needs PostgreSQL ({why})")


@pytest.fixture
def commit_fails(db):
    """A deferred constraint trigger that refuses every COMMIT touching NodeHealth: every statement
    succeeds, the commit itself fails (SQLite has no deferred triggers)."""
    postgresql_only("a deferred constraint trigger")
    from telemetry.models import NodeHealth

    table = NodeHealth._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION nw_test_refuse_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'commit refused by the test'; END $$"
        )
        cursor.execute(
            f"CREATE CONSTRAINT TRIGGER nw_test_refuse_commit AFTER INSERT OR UPDATE ON {table} "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION nw_test_refuse_commit()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER nw_test_refuse_commit ON {table}")
        cursor.execute("DROP FUNCTION nw_test_refuse_commit()")


def test_no_request_learns_success_when_the_commit_fails(nodes, commit_fails):
    group = [request(node, reports_of(node.hostname)) for node in nodes]
    groupcommit.commit_group(group)
    assert all(isinstance(r.error, DatabaseError) and r.result is None for r in group)
    assert NodeReport.objects.count() == 0


def test_the_endpoint_answers_503_not_200_when_the_commit_fails(nodes, commit_fails):
    response = AgentClient(issue_agent_token(nodes[0].pk, actor=Actor.system("test"))).post(
        make_batch(nodes[0].hostname, start=T0)
    )
    assert response.status_code == 503
    assert response["Retry-After"]
    assert NodeReport.objects.count() == 0


# One writer that waits up to 5 s for the group to fill (6 reports): the three requests are one group.
@override_settings(NODEWARDEN_INGEST_GROUP_WAIT_MS=5000, NODEWARDEN_INGEST_GROUP_MAX=6, NODEWARDEN_INGEST_WRITERS=1)
def test_concurrent_requests_are_answered_after_one_shared_commit(nodes):
    # One writer that waits (up to 5 s) for the six reports of the three requests: on a loaded
    # machine the default 2 ms, or a second writer taking the second request, would split the group.
    postgresql_only("group commit is off on SQLite, whose one writer would lock the others out")
    tokens = [issue_agent_token(node.pk, actor=Actor.system("test")) for node in nodes]
    answers: dict[int, Any] = {}
    commits = []
    original = groupcommit.commit_group

    def counting(group: list[Any]) -> None:
        commits.append(len(group))
        original(group)

    def post(i: int) -> None:
        body = make_batch(nodes[i].hostname, start=T0, count=i + 1)
        answers[i] = AgentClient(tokens[i]).post(body)
        connection.close()  # this thread's own connection, before the test database goes

    groupcommit.commit_group = counting  # counts the groups; the real one runs
    try:
        threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        groupcommit.commit_group = original
    assert {i: (a.status_code, a.json()) for i, a in answers.items()} == {
        i: (200, {"accepted": i + 1, "duplicates": 0}) for i in range(3)
    }
    assert commits == [3]  # one transaction for the three requests
    assert NodeReport.objects.count() == 6


def test_a_full_queue_answers_503_with_retry_after_and_is_counted(nodes, committer):
    postgresql_only("group commit is off on SQLite")
    # The writer is behind: one request is already waiting (none was started) and the bound is one report.
    committer._pid = os.getpid()
    committer._queue.append(request(nodes[1], reports_of(nodes[1].hostname)))
    committer._queued_reports = 1
    before = groupcommit.busy_total()
    agent = AgentClient(issue_agent_token(nodes[0].pk, actor=Actor.system("test")))
    with override_settings(NODEWARDEN_INGEST_QUEUE_LIMIT=1):
        response = agent.post(make_batch(nodes[0].hostname, start=T0))
    assert response.status_code == 503
    assert response["Retry-After"] == str(groupcommit.RETRY_AFTER_SECONDS)
    assert response.json()["error"] == "unavailable"
    assert groupcommit.busy_total() == before + 1
    assert NodeReport.objects.count() == 0


def test_metrics_show_the_busy_answers(nodes, monkeypatch):
    from reports.metrics import registry

    monkeypatch.setattr(groupcommit, "busy_total", lambda: 7)
    assert registry().get_sample_value("nodewarden_ingest_busy_total") == 7


def test_a_test_waits_for_the_writers_it_started_only(request, monkeypatch):
    """The process's committer (its writers outlive any test) is not waited for when a test ends; the
    test's own committer's writers end at once. A test once waited 5 s for each writer of the process
    after it: minutes of a CI run, on two modules."""
    process_committer = groupcommit.GroupCommitter()
    with process_committer._lock:
        process_committer._ensure_writer()  # writers that outlive the test, as the process's do
    request.addfinalizer(process_committer.stop)
    before = set(threading.enumerate())
    started = time.monotonic()
    with own_ingest_committer(monkeypatch) as fresh:
        with fresh._lock:
            fresh._ensure_writer()
        ours = [t for t in threading.enumerate() if t not in before]
    assert time.monotonic() - started < 2.0
    assert len(ours) == settings.NODEWARDEN_INGEST_WRITERS and not any(t.is_alive() for t in ours)
