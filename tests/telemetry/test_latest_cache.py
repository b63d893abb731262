"""telemetry.ingest.LatestCache: an ingest process's copy of each node's latest state, checked
against the node's health row on every group read. The copy must be exactly what the database
would give, and must never be used once anything else has written the node."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from django.db import connection
from django.test import override_settings

from telemetry import consumers, ingest, store
from telemetry.ingest import LATEST, ingest_many, ingest_reports
from telemetry.models import GpuState, NodeHealth
from telemetry.schema import AgentReport
from telemetry.testing import make_report
from tests.factories import NodeFactory

from .conftest import T0

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _postgresql_and_an_empty_cache():
    if connection.vendor != "postgresql":
        pytest.skip("the group read that checks the copy is PostgreSQL's; bin/test runs this on PostgreSQL")
    LATEST.clear()
    yield
    LATEST.clear()


def one(node, at, **kwargs) -> list[AgentReport]:
    return [msgspec.convert(make_report(node.hostname, collected_at=at, **kwargs), AgentReport)]


def committed_group(capture, batches):
    with capture(execute=True):  # LatestCache.keep runs on commit
        return ingest_many(batches)


def stored_latest(node) -> ingest._Latest:
    snapshot = store.read_node(node.pk, consumers.CONSUMER.read_with_node)
    return ingest._latest(snapshot.node, snapshot.gpus)


def test_the_copy_is_what_the_database_gives(node, django_capture_on_commit_callbacks):
    committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0, seed=1))])
    assert LATEST.take([node.pk]) == [None]  # a first report: GPU rows of an earlier life may remain
    # A report of six GPUs: the two others stay as stored before.
    six = one(node, T0 + timedelta(seconds=30), seed=2, gpus=6)
    committed_group(django_capture_on_commit_callbacks, [(node.pk, six)])

    (copy,) = LATEST.take([node.pk])
    assert copy is not None
    cached, stored = copy.latest(), stored_latest(node)
    assert cached == stored
    assert list(cached.gpus) == list(stored.gpus) == list(range(8))
    assert {i: [type(v) for v in msgspec.structs.astuple(g)] for i, g in cached.gpus.items()} == {
        i: [type(v) for v in msgspec.structs.astuple(g)] for i, g in stored.gpus.items()
    }
    assert cached.gpus[7] == one(node, T0, seed=1)[0].gpus[7] and cached.gpus[0] == six[0].gpus[0]
    assert cached.host["uptime_s"] == 86_402.0 and len(cached.ib_ports) == 8
    assert ingest._written(msgspec.structs.replace(six[0], host=None), ingest._Latest(at=T0), T0).latest().host == {}


def test_a_group_read_skips_what_the_copy_holds(node, django_capture_on_commit_callbacks):
    firing = consumers.CONSUMER.read_with_node
    for k in range(2):
        committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0 + timedelta(seconds=30 * k)))])
    (copy,) = LATEST.take([node.pk])
    read = store.read_nodes([node.pk], firing, [copy.stored])[node.pk]
    assert read.cached and read.gpus == [] and read.node["health__host"] is None
    assert read.node["health__last_report_at"] == T0 + timedelta(seconds=30)
    # Without the copy: the whole state.
    full = store.read_nodes([node.pk], firing)[node.pk]
    assert not full.cached and len(full.gpus) == 8 and full.node["health__host"]


def test_a_copy_is_not_used_once_another_writer_moved_the_node(node, django_capture_on_commit_callbacks, monkeypatch):
    # Another ingest process (here the one-node road, which keeps no copy) writes a newer report
    # with a GPU gone; the next group must see that state, not this process's copy.
    for k in range(2):
        committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0 + timedelta(seconds=30 * k)))])
    assert LATEST.take([node.pk])[0] is not None
    other = one(node, T0 + timedelta(seconds=60), seed=9, gpus=7)
    ingest_reports(node.pk, other)
    GpuState.objects.filter(node=node, index=7).delete()  # as an operator would after swapping the board
    NodeHealth.objects.filter(node=node).update(last_received_at=T0 + timedelta(seconds=61))
    expected = stored_latest(node)

    seen = []
    contexts = ingest._contexts

    def record(node_row, new, latest, source):
        seen.append(latest)
        return contexts(node_row, new, latest, source)

    monkeypatch.setattr(ingest, "_contexts", record)
    committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0 + timedelta(seconds=90), seed=3))])
    assert seen == [expected]
    assert sorted(seen[0].gpus) == list(range(7)) and seen[0].gpus[0] == other[0].gpus[0]


def test_a_late_report_keeps_no_copy_and_a_rolled_back_group_none(node, django_capture_on_commit_callbacks):
    for k in (1, 2):
        committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0 + timedelta(seconds=30 * k)))])
    (kept,) = LATEST.take([node.pk])
    committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0, seed=4))])  # older: history only
    assert LATEST.take([node.pk]) == [kept]
    with django_capture_on_commit_callbacks(execute=False):  # the group's transaction never commits
        ingest_many([(node.pk, one(node, T0 + timedelta(seconds=90), seed=5))])
    assert LATEST.take([node.pk]) == [kept]


def test_the_copies_are_bounded_least_recently_written_first(django_capture_on_commit_callbacks):
    nodes = [NodeFactory() for _ in range(3)]
    with override_settings(NODEWARDEN_INGEST_LATEST_CACHE_NODES=2):
        for k in range(2):
            for n in nodes:
                committed_group(django_capture_on_commit_callbacks, [(n.pk, one(n, T0 + timedelta(seconds=30 * k)))])
        assert len(LATEST) == 2 and LATEST.take([nodes[0].pk]) == [None]
    LATEST.clear()
    with override_settings(NODEWARDEN_INGEST_LATEST_CACHE_NODES=0):
        for k in range(2):
            committed_group(
                django_capture_on_commit_callbacks, [(nodes[0].pk, one(nodes[0], T0 + timedelta(seconds=30 * k)))]
            )
        assert len(LATEST) == 0


def test_a_state_pulled_back_leaves_the_copy_it_came_from_as_it_was(node, django_capture_on_commit_callbacks):
    # Every state read from a copy shares it: _unpin_latest, the one place that changes a previous
    # state, pulls back the state in hand and the stored rows, not the copy.
    committed_group(django_capture_on_commit_callbacks, [(node.pk, one(node, T0, seed=1))])
    ahead = T0 + timedelta(days=30)
    NodeHealth.objects.filter(node=node).update(last_report_at=ahead)
    GpuState.objects.filter(node=node).update(updated_at=ahead)
    copy = ingest._written(one(node, ahead + timedelta(seconds=30), seed=2)[0], stored_latest(node), T0)
    pulled = copy.latest()
    ingest._unpin_latest(node.pk, pulled, received_at=T0)
    assert pulled.at == T0 and set(GpuState.objects.filter(node=node).values_list("updated_at", flat=True)) == {T0}
    assert pulled.gpus == copy.latest().gpus and copy.latest().at == ahead + timedelta(seconds=30)
