"""Remediation at fleet speed (issue 17): a burst of findings costs a bounded number of SQL statements
each, with every guarantee kept (history rows with actor and reason, one cordon per node, the
scheduler reaction queued once per node)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from health.models import Finding
from health.services import raise_finding
from nodes import services as node_services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import Node, NodeEvent, Run
from nodes.services import Actor
from remediation import services
from remediation.choices import Status
from remediation.models import BlastRadiusLimit, CircuitBreaker, Hold, Remediation, RemediationPolicy
from schedulers.models import PendingReaction
from tests.factories import NodeFactory, RackFactory

pytestmark = pytest.mark.django_db
# SQL statements one catastrophic finding may cost, from its read to its cordon queued for the
# scheduler (savepoints included). It was 39 before the reads were merged; 30 now.
STATEMENTS_PER_FINDING = 30
# The same, a node of a commit's findings decided together (``consider_findings``): the rails and the
# policies read once for a chunk, no savepoint of the admission's own. 21.9 a node for 7 nodes.
STATEMENTS_PER_NODE_TOGETHER = 22
STATEMENTS_PER_NODE_TO_HAND_OFF = 96


def xid(node) -> int:
    """A catastrophic XID finding on the node, committed without being considered yet."""
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
    return Finding.objects.filter(node=node).latest("pk").pk


def test_a_burst_of_catastrophic_findings_costs_a_bounded_number_of_statements_each(fleet):
    # As in bin/bench remediation: the breaker stays armed (6 of 30 nodes with findings is below
    # its 30 %), the blast-radius limits are raised so that every node of the burst is taken out.
    NodeFactory.create_batch(20, cluster=fleet[0].cluster, state=NodeState.PRODUCTION)
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    RemediationPolicy.objects.create(name="xid 79 now", match_xid=79, urgency="now", first_rung="repair")
    findings = [xid(node) for node in fleet[:6]]
    services.consider_finding(findings[0])  # the first one warms what is read once per process
    with CaptureQueriesContext(connection) as ctx:
        for finding_id in findings[1:]:
            services.consider_finding(finding_id)
    assert len(ctx.captured_queries) <= STATEMENTS_PER_FINDING * 5, "\n".join(
        q["sql"][:160] for q in ctx.captured_queries
    )
    for node in fleet[:6]:
        node.refresh_from_db()
        assert node.state == NodeState.TRIAGE
        rem = Remediation.objects.get(node=node)
        assert rem.status == Status.QUEUED and rem.decisions[0]["what"].startswith("XID 79")
        assert len(rem.decisions) == 2  # the plan, and the cordon (its rung starts in its own task)
        events = NodeEvent.objects.filter(node=node).order_by("created", "id")
        assert [(e.kind, e.transition, e.actor_name) for e in events if e.kind != "finding"] == [
            ("action", "", "system:remediation"),
            ("transition", "cordon", "system:remediation"),
        ]
        assert all(e.reason for e in events)
        assert PendingReaction.objects.filter(node=node, reaction="evict").count() == 1


def test_a_redelivered_finding_decides_nothing_twice(fleet):
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    finding = xid(fleet[0])
    first = services.consider_finding(finding)
    assert first is not None
    assert services.consider_finding(finding) is None
    assert Remediation.objects.filter(node=fleet[0]).count() == 1


def test_the_follow_up_of_a_cordon_reads_no_more_than_it_needs(fleet, eager, django_capture_on_commit_callbacks):
    """A cordon's follow-up task (its scheduler reaction, batched per cluster) takes one batch when the
    batch is not full (no second read for an empty one), and does not read the node again to show
    its health where the scheduler shows none (no scheduler here, nor Slurm)."""
    node = fleet[0]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        node_services.cordon(node.pk, actor=Actor.system("test"), reason="a cordon")
    assert len(callbacks) == 1
    with eager(), CaptureQueriesContext(connection) as ctx:
        callbacks[0]()
    reads = [q["sql"] for q in ctx.captured_queries]
    assert PendingReaction.objects.filter(node=node).count() == 0  # carried out
    assert sum('FROM "schedulers_pendingreaction"' in sql and sql.startswith("SELECT") for sql in reads) == 1, reads
    assert sum(sql.startswith('SELECT "nodes_node"') for sql in reads) == 1, reads  # the reaction's (the state now)


def test_a_follow_up_run_is_created_running(fleet, eager, django_capture_on_commit_callbacks):
    """The follow-up's Run row is inserted running and updated once when it ends: no UPDATE between."""
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        node_services.cordon(fleet[0].pk, actor=Actor.system("test"), reason="a cordon")
    with eager(), CaptureQueriesContext(connection) as ctx:
        callbacks[0]()
    updates = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith('UPDATE "checks_checkrun"')]
    assert len(updates) == 1, updates
    run = Run.objects.get(trigger__node=fleet[0], kind=RunKind.TRANSITION_FOLLOWUP)
    assert run.status == RunStatus.PASSED and run.started is not None and run.finished >= run.started


# --- A commit's findings decided together: the same verdicts as one at a time ----------------------


def degraded(node) -> int:
    """A degraded finding naming no GPU (so no fence is tried): the node drains when idle."""
    raise_finding(node.pk, rule="xid", severity="degraded", xid=13, subject="xid:13", summary="XID 13: graphics engine")
    return Finding.objects.filter(node=node).latest("pk").pk


def outcomes(findings: list[int]) -> list[object]:
    """What each finding led to, in order, and the breakers: nothing that names a row's id."""
    rows: list[object] = []
    for finding_id in findings:
        rem = Remediation.objects.select_related("node").filter(finding_id=finding_id).first()
        finding = Finding.objects.select_related("node").get(pk=finding_id)
        what = [d["what"] for d in rem.decisions] if rem else []
        rows.append((rem.status if rem else None, rem.queued_reason if rem else None, finding.node.state, what))
    rows.append(sorted(CircuitBreaker.objects.values_list("cluster_id", "reset_at")))
    return rows


def decided_alone_and_together(findings: list[int]) -> tuple[list[object], list[object]]:
    """The same findings decided one at a time (``consider_finding`` in order, as many tasks would),
    rolled back, then together (``consider_findings``), at the same instant."""
    now = timezone.now()
    with transaction.atomic():
        for finding_id in findings:
            services.consider_finding(finding_id, now)
        alone = outcomes(findings)
        transaction.set_rollback(True)
    with transaction.atomic():
        services.consider_findings(findings, now)
        together = outcomes(findings)
    return alone, together


@pytest.fixture
def big_cluster(fleet):
    """The fleet's cluster grown to 40 nodes, so that 8 nodes with findings (20 %) trip no breaker."""
    NodeFactory.create_batch(30, cluster=fleet[0].cluster, state=NodeState.PRODUCTION)
    return fleet


@pytest.mark.parametrize("chunk", [1, 3, 25])
@pytest.mark.parametrize(
    ("limit", "cordoned", "draining"),
    [
        # Out of production: at most 4 nodes (a drain pending still serves: it does not count).
        ({"max_share": 1.0, "max_count": 4, "max_drains_per_hour": 1000}, 4, 1),
        ({"max_share": 0.1, "max_count": 1000, "max_drains_per_hour": 1000}, 4, 1),  # 10 % of 40
        ({"max_share": 1.0, "max_count": 1000, "max_drains_per_hour": 3}, 3, 0),  # 3 automated drains an hour
    ],
)
def test_a_burst_past_the_limits_stops_at_the_same_count_alone_or_together(
    big_cluster, monkeypatch, chunk, limit, cordoned, draining
):
    monkeypatch.setattr(services, "ADMIT_CHUNK", chunk)
    BlastRadiusLimit.objects.create(domain="cluster", **limit)
    # A degraded finding among them drains (serving still, but an automated drain in the hour).
    findings = [xid(node) for node in big_cluster[:3]] + [degraded(big_cluster[3])]
    findings += [xid(node) for node in big_cluster[4:8]]
    alone, together = decided_alone_and_together(findings)
    assert together == alone
    states = [row[2] for row in together[:-1]]
    assert (states.count(NodeState.TRIAGE), states.count(NodeState.DRAIN_PENDING)) == (cordoned, draining)
    stopped = cordoned + draining
    assert all(row[2] == NodeState.PRODUCTION and row[1] for row in together[stopped:-1]), together


@pytest.mark.parametrize("chunk", [2, 25])
def test_a_rack_limit_a_hold_and_a_second_finding_decide_alike_alone_or_together(big_cluster, monkeypatch, chunk):
    monkeypatch.setattr(services, "ADMIT_CHUNK", chunk)
    rack = RackFactory()
    Node.objects.filter(pk__in=[n.pk for n in big_cluster[:5]]).update(rack=rack)
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    BlastRadiusLimit.objects.create(domain="rack", max_share=1.0, max_count=2, max_drains_per_hour=1000)
    Hold.objects.create(node=big_cluster[6], reason="being looked at", actor_name="ops")
    findings = [xid(node) for node in big_cluster[:8]] + [degraded(big_cluster[1])]  # node 1 again
    alone, together = decided_alone_and_together(findings)
    assert together == alone
    states = [row[2] for row in together[:8]]
    assert states.count(NodeState.TRIAGE) == 2 + 2  # two of the rack's five, and nodes 5 and 7


def test_a_spike_trips_the_breaker_at_the_same_finding_alone_or_together(fleet, monkeypatch):
    """10 nodes, findings on 6 (60 %): the breaker trips at the first finding either way; nothing acts."""
    monkeypatch.setattr(services, "ADMIT_CHUNK", 4)
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    findings = [xid(node) for node in fleet[:6]]
    alone, together = decided_alone_and_together(findings)
    assert together == alone
    assert all(row[2] == NodeState.PRODUCTION and row[1].startswith("circuit breaker") for row in together[:-1])
    assert len(together[-1]) == 1


def test_a_commit_of_findings_is_decided_in_bounded_statements_per_node(big_cluster):
    """A burst decided together (``consider_findings``): the rails counted once per chunk, the rungs
    queued once for the batch. One at a time it was 30 statements a finding."""
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    RemediationPolicy.objects.create(name="xid 79 now", match_xid=79, urgency="now", first_rung="repair")
    findings = [xid(node) for node in big_cluster[:8]]
    services.consider_finding(findings[0])  # warms what is read once per process
    with CaptureQueriesContext(connection) as ctx:
        services.consider_findings(findings[1:])
    assert len(ctx.captured_queries) <= STATEMENTS_PER_NODE_TOGETHER * 7, "\n".join(
        q["sql"][:160] for q in ctx.captured_queries
    )
    for node in big_cluster[1:8]:
        node.refresh_from_db()
        assert node.state == NodeState.TRIAGE
        assert PendingReaction.objects.filter(node=node, reaction="evict").count() == 1


def test_a_commit_of_findings_is_one_task_and_its_rungs_one_more(fleet, eager, caplog):
    """The consideration of a commit's findings is one task, the rungs of the nodes it cordoned start in
    one more, and the follow-ups of the cordons (and of the hand-offs) are one task for each
    transaction: not a task of each per node. Every transition keeps its own run. A GPU the inventory
    lacks is warned about once (by health's task), not again by remediation's."""
    from nodes import tasks as node_tasks
    from remediation import tasks

    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    RemediationPolicy.objects.create(name="xid 79 now", match_xid=79, urgency="now", first_rung="repair")
    spied = (
        tasks.consider_findings,
        tasks.consider_finding,
        tasks.start_rungs,
        tasks.start_rung,
        node_tasks.run_transition_followup,
        node_tasks.run_transition_followups,
    )
    sent: list[tuple[str, object]] = []
    for task in spied:
        original = task.apply_async

        def spy(args=None, kwargs=None, _name=task.name, _original=original, **options):
            sent.append((_name.rsplit(".", 1)[1], args))
            return _original(args=args, kwargs=kwargs, **options)

        task.apply_async = spy
    try:
        with eager(), transaction.atomic():
            findings = [xid(node) for node in fleet[:3]]
    finally:
        for task in spied:
            del task.apply_async
    unknown = [r for r in caplog.records if r.levelname == "WARNING" and "not in node" in r.getMessage()]
    assert len(unknown) == 3, unknown  # the fleet's nodes have no GPU 3
    assert sorted(name for name, _ in sent) == [
        "consider_findings",
        "run_transition_followups",  # the three cordons
        "run_transition_followups",  # the three hand-offs to repair
        "start_rungs",
    ], sent
    assert list(sent[0][1][0]) == findings
    assert all(len(args[0]) == 3 for name, args in sent if name != "consider_findings")
    for node in fleet[:3]:
        node.refresh_from_db()
        assert node.state == NodeState.REPAIR  # cordoned, then handed to a repair ticket
        runs = Run.objects.filter(node=node, kind=RunKind.TRANSITION_FOLLOWUP)
        assert sorted(runs.values_list("trigger__transition", "status")) == [
            ("cordon", RunStatus.PASSED),
            ("send_to_repair", RunStatus.PASSED),
        ]


def test_a_node_of_a_burst_costs_bounded_statements_from_its_finding_to_its_hand_off(
    big_cluster, eager, django_capture_on_commit_callbacks
):
    """Everything a commit of 8 catastrophic findings causes, all run inline (Celery eager): the GPU
    suspicion, the consideration, the cordons' follow-ups (the scheduler reaction), the rungs' start
    (repair: a ticket) and the hand-offs' follow-ups: 103.3 statements a node with a task of each per node
    (this test on the code before), 96.0 now; a third of them savepoints (inside the test's transaction
    every ``atomic`` is one)."""
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    RemediationPolicy.objects.create(name="xid 79 now", match_xid=79, urgency="now", first_rung="repair")
    with eager(), transaction.atomic():
        xid(big_cluster[9])  # warms what is read once per process
    with django_capture_on_commit_callbacks(execute=False) as callbacks, transaction.atomic():
        for node in big_cluster[:8]:
            xid(node)
    with CaptureQueriesContext(connection) as ctx, eager():
        for callback in callbacks:
            callback()
    assert len(ctx.captured_queries) <= STATEMENTS_PER_NODE_TO_HAND_OFF * 8, len(ctx.captured_queries)
    for node in big_cluster[:8]:
        node.refresh_from_db()
        assert node.state == NodeState.REPAIR


def test_a_finding_that_fails_in_a_batch_undoes_its_own_work_only(fleet, monkeypatch, caplog):
    """One finding's error (here, its cordon) is logged and rolled back alone, as its own failed task
    would be; the findings after it in the same chunk are still decided, against counts read again."""
    BlastRadiusLimit.objects.create(domain="cluster", max_share=1.0, max_count=1000, max_drains_per_hour=1000)
    findings = [xid(node) for node in fleet[:3]]
    cordon = node_services.cordon

    def failing_cordon(node_id, **kwargs):
        if node_id == fleet[1].pk:
            raise RuntimeError("the database went away for this one")
        return cordon(node_id, **kwargs)

    monkeypatch.setattr(node_services, "cordon", failing_cordon)
    results = services.consider_findings(findings)
    assert [rem is not None for rem in results] == [True, False, True]
    states = [Node.objects.get(pk=node.pk).state for node in fleet[:3]]
    assert states == [NodeState.TRIAGE, NodeState.PRODUCTION, NodeState.TRIAGE]
    assert not Remediation.objects.filter(node=fleet[1]).exists()
    assert any(f"finding {findings[1]} could not be considered" in r.getMessage() for r in caplog.records)
