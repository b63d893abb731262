"""What a burst of new findings costs its committing caller (issue 17): the follow-ups of new
findings and of alert changes run inline after the COMMIT (for an agent: inside its ingest
request), before any remediation can start. They take a batch of ids per transaction, so a
burst costs a fixed number of statements there, whatever its size; the GPU's suspicion is
written in a task, and remediation marks the GPU itself before it acts."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.choices import SchedulerKind
from health import followups
from health.models import Finding
from health.services import raise_finding
from nodes.choices import EventKind, GpuHealth, NodeState
from nodes.models import GPU, NodeEvent
from remediation import tasks as remediation_tasks
from tests.factories import ClusterFactory, GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db
BURST = 40
# Statements the on-commit follow-ups of a whole burst may run (both registries, every handler):
# two reads of the findings' and alerts' nodes and clusters for the scheduler's health report, and
# nothing per finding. The per-finding handlers ran about ten a finding (400 for this burst).
STATEMENTS_ON_COMMIT = 6


@pytest.fixture
def burst(db) -> list:
    """A Slurm cluster (its scheduler shows no health) of production nodes, each with its GPU 3."""
    cluster = ClusterFactory(name="burst", scheduler_kind=SchedulerKind.SLURM)
    nodes = NodeFactory.create_batch(BURST, cluster=cluster, state=NodeState.PRODUCTION)
    for node in nodes:
        GPUFactory(node=node, index=3, uuid=f"GPU-{node.pk}-3")
    return nodes


def xid79(node) -> None:
    raise_finding(
        node.pk,
        rule="xid",
        severity="catastrophic",
        xid=79,
        subject="xid:79",
        gpu_index=3,
        summary="XID 79: GPU has fallen off the bus",
        recommended_action="power_cycle",
    )


@pytest.fixture
def handler_costs() -> Iterator[dict[str, list[float]]]:
    """Every registered handler wrapped: statements and milliseconds, summed per handler."""
    costs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0])

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{fn.__module__}.{fn.__qualname__}"

        def measured(*args: Any) -> Any:
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                result = fn(*args)
                costs[name][1] += (time.perf_counter() - started) * 1000
            costs[name][0] += len(ctx.captured_queries)
            costs[name][2] += 1
            return result

        return measured

    registries = (followups.ON_NEW_FINDING, followups.ON_ALERT_CHANGE)
    saved = [list(registry) for registry in registries]
    for registry in registries:
        registry[:] = [wrap(fn) for fn in registry]  # in place: the queue functions hold the lists
    try:
        yield costs
    finally:
        for registry, handlers in zip(registries, saved, strict=True):
            registry[:] = handlers
    for name, (statements, ms, calls) in sorted(costs.items()):
        print(f"{name}: {calls} calls, {statements} statements, {ms:.1f} ms")


def test_a_burst_of_findings_costs_a_bounded_number_of_statements_on_commit(
    burst, handler_costs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        for node in burst:
            xid79(node)
    assert Finding.objects.filter(node__in=burst).count() == BURST

    with CaptureQueriesContext(connection) as ctx:
        for callback in callbacks:
            callback()

    assert len(ctx.captured_queries) <= STATEMENTS_ON_COMMIT, "\n".join(q["sql"][:160] for q in ctx.captured_queries)
    # Every handler ran, each once for the whole burst.
    assert {calls for _, _, calls in handler_costs.values()} == {1}
    assert len(handler_costs) == len(followups.ON_NEW_FINDING) + len(followups.ON_ALERT_CHANGE)


def test_the_gpus_of_a_burst_are_suspect_once_its_task_runs_one_history_row_each(burst):
    from health.tasks import suspect_named_gpus

    for node in burst[:5]:
        xid79(node)
        xid79(node)  # the same GPU named twice: one suspicion
    ids = list(Finding.objects.filter(node__in=burst[:5]).values_list("pk", flat=True))
    assert len(ids) == 10  # two findings per GPU: one suspicion each GPU
    suspect_named_gpus(ids)
    suspect_named_gpus(ids)  # a redelivered task writes nothing more
    assert set(GPU.objects.filter(node__in=burst[:5]).values_list("health", flat=True)) == {GpuHealth.SUSPECT}
    assert NodeEvent.objects.filter(node__in=burst[:5], kind=EventKind.GPU).count() == 5


def test_remediation_marks_the_gpu_suspect_before_it_acts_whichever_task_runs_first(burst):
    node = burst[0]
    xid79(node)
    finding = Finding.objects.get(node=node)

    remediation_tasks.consider_finding(finding.pk)  # before health's own suspicion task

    gpu_events = NodeEvent.objects.filter(node=node, kind=EventKind.GPU).order_by("created", "pk")
    assert gpu_events.count() == 1 and gpu_events[0].details["finding"] == finding.pk
    first_action = NodeEvent.objects.filter(node=node).exclude(kind__in=[EventKind.GPU, "finding"]).first()
    assert first_action is None or first_action.pk > gpu_events[0].pk  # the suspicion comes first
    assert GPU.objects.get(node=node, index=3).health == GpuHealth.SUSPECT


class Undo(Exception):
    """Rolls back a savepoint of the test."""


def xid79_rolled_back(node) -> None:
    """A finding raised in a savepoint that then rolls back."""
    from django.db import transaction

    try:
        with transaction.atomic():
            xid79(node)
            raise Undo
    except Undo:
        pass


def test_a_finding_rolled_back_with_its_savepoint_is_handed_to_no_handler(burst, django_capture_on_commit_callbacks):
    from health.tasks import suspect_named_gpus

    first, second, third = burst[:3]
    with django_capture_on_commit_callbacks() as callbacks:
        xid79_rolled_back(first)  # the batch's first id, rolled back: the batch goes with it
        xid79(second)
        xid79_rolled_back(third)  # rolled back inside a batch that stays
    batches = [
        c for c in callbacks if isinstance(c, followups.FollowupBatch) and c.handlers is followups.ON_NEW_FINDING
    ]
    (batch,) = batches
    kept = Finding.objects.get(node=second).pk
    assert kept in batch.ids and not Finding.objects.filter(node__in=[first, third]).exists()
    suspect_named_gpus(batch.ids)  # the rolled-back finding's row is not there: nothing happens to its GPU
    health = dict(GPU.objects.filter(node__in=burst[:3]).values_list("node_id", "health"))
    assert health == {first.pk: GpuHealth.HEALTHY, second.pk: GpuHealth.SUSPECT, third.pk: GpuHealth.HEALTHY}
