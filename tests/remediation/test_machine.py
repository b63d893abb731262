"""The remediation's state machines, walked pair by pair: every (from, to) status pair of a
remediation and of a step is either declared, and moves, or refused with a clear error and
no change; and no code outside remediation.machine writes a status."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.utils import timezone

from nodes.choices import NodeState
from nodes.models import Node
from remediation import machine, reconciler, services
from remediation.choices import DONE, Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationStep
from tests.factories import ClusterFactory, NodeFactory

S, T = Status, StepStatus

# The remediation as an operator would draw it: (from, to) -> the verb that makes the move.
EXPECTED: dict[tuple[str, str], str] = {
    (S.QUEUED, S.QUEUED): "admit / start_rung: a rail (hold, window, confirmation) queues it again",
    (S.QUEUED, S.AWAITING_APPROVAL): "consider_finding: the policy asks for approval",
    (S.QUEUED, S.DRAINING): "admit: drain when idle",
    (S.QUEUED, S.RUNNING): "admit -> start_rung (act now)",
    (S.QUEUED, S.HANDED_OFF): "admit -> start_rung on a repair or RMA rung",
    (S.QUEUED, S.CLEARED): "stand_down: cleared while confirming in triage",
    (S.QUEUED, S.FENCED): "admit -> fence_instead: the finding's GPU fenced, the node serves on",
    (S.QUEUED, S.STOPPED): "stop, end_superseded, or a shadow policy",
    (S.QUEUED, S.FAILED): "skip_rung on the last rung",
    (S.AWAITING_APPROVAL, S.QUEUED): "approve",
    (S.AWAITING_APPROVAL, S.STOPPED): "stop, end_superseded",
    (S.AWAITING_APPROVAL, S.FAILED): "skip_rung on the last rung",
    (S.DRAINING, S.QUEUED): "on_drained -> start_rung: a rail queues it",
    (S.DRAINING, S.RUNNING): "on_drained / hasten -> start_rung",
    (S.DRAINING, S.HANDED_OFF): "on_drained -> start_rung on a repair or RMA rung",
    (S.DRAINING, S.CLEARED): "stand_down: cleared before the job ended",
    (S.DRAINING, S.STOPPED): "stop, end_superseded",
    (S.RUNNING, S.QUEUED): "start_rung after a climb: the window is closed",
    (S.RUNNING, S.RUNNING): "escalate (climb), start_rung (the reconciler restarts a stranded one)",
    (S.RUNNING, S.VALIDATING): "action_done",
    (S.RUNNING, S.HANDED_OFF): "start_rung after a climb to repair or RMA",
    (S.RUNNING, S.STOPPED): "stop, end_superseded",
    (S.RUNNING, S.FAILED): "escalate with no rung left",
    (S.VALIDATING, S.RUNNING): "on_validation_failed -> escalate",
    (S.VALIDATING, S.SUCCEEDED): "on_back_in_production",
    (S.VALIDATING, S.STOPPED): "on_back_in_production while still firing, stop, end_superseded",
}
STEP_EXPECTED: dict[tuple[str, str], str] = {
    (T.RUNNING, T.VERIFYING): "action_done",
    (T.RUNNING, T.FAILED): "step_failed",
    (T.RUNNING, T.SKIPPED): "stop, end_superseded, skip_rung",
    (T.VERIFYING, T.PASSED): "on_back_in_production",
    (T.VERIFYING, T.FAILED): "on_validation_failed, on_back_in_production while still firing",
    (T.VERIFYING, T.SKIPPED): "stop, end_superseded",
}

PAIRS = [(a, b) for a in Status.values for b in Status.values]
STEP_PAIRS = [(a, b) for a in StepStatus.values for b in StepStatus.values]


def test_the_tables_are_the_expected_ones():
    declared = {(a, b) for a, targets in machine.MOVES.items() for b in targets}
    assert declared == set(EXPECTED)
    assert {(a, b) for a, targets in machine.STEP_MOVES.items() for b in targets} == set(STEP_EXPECTED)
    assert set(machine.MOVES) == set(Status.values) and set(machine.STEP_MOVES) == set(StepStatus.values)


def test_the_final_statuses_are_final():
    assert {s for s, targets in machine.MOVES.items() if not targets} == set(DONE)


def _remediation(status: str) -> Remediation:
    return Remediation.objects.create(
        node=NodeFactory(state=NodeState.TRIAGE), status=status, urgency=Urgency.NOW, rung=Rung.REBOOT
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_each_remediation_status_pair(source, target):
    rem = _remediation(source)
    if (source, target) in EXPECTED:
        machine.move(rem, target)
        assert rem.status == target
    else:
        with pytest.raises(machine.IllegalMove, match=f"cannot go from {source} .* to {target} "):
            machine.move(rem, target)
        assert rem.status == source
    rem.refresh_from_db()
    assert rem.status == source, "move changes the object; the caller saves it with its decision"


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), STEP_PAIRS)
def test_each_step_status_pair(source, target):
    step = RemediationStep.objects.create(
        remediation=_remediation(S.RUNNING), rung=Rung.REBOOT, status=source, deadline=timezone.now()
    )
    steps = RemediationStep.objects.filter(pk=step.pk)
    if (source, target) in STEP_EXPECTED:
        assert machine.move_steps(steps, [source], target) == 1
        step.refresh_from_db()
        assert step.status == target
    else:
        with pytest.raises(machine.IllegalMove, match=f"cannot go from {source} to {target}"):
            machine.move_steps(steps, [source], target)
        step.refresh_from_db()
        assert step.status == source


@pytest.mark.django_db
def test_a_step_move_is_a_compare_and_swap():
    step = RemediationStep.objects.create(
        remediation=_remediation(S.RUNNING), rung=Rung.REBOOT, status=T.FAILED, deadline=timezone.now()
    )
    assert machine.move_steps(RemediationStep.objects.filter(pk=step.pk), [T.RUNNING], T.VERIFYING) == 0
    step.refresh_from_db()
    assert step.status == T.FAILED


@pytest.mark.django_db
def test_an_illegal_move_is_a_conflict_at_the_edges():
    from django_fsm import TransitionNotAllowed

    assert issubclass(machine.IllegalMove, services.RemediationConflict)  # the views' and API's 409
    assert issubclass(machine.IllegalMove, TransitionNotAllowed)  # the project's exception handler's 409


@pytest.mark.django_db
def test_it_refuses_to_climb_a_stopped_remediation():
    """A step failing late (a delivery racing an operator's stop) must not reopen what was stopped."""
    rem = _remediation(S.STOPPED)
    with pytest.raises(machine.IllegalMove, match=r"cannot go from stopped \(stopped by an operator\) to running"):
        services.escalate(rem, "reboot failed")
    rem.refresh_from_db()
    assert rem.status == S.STOPPED and rem.rung == Rung.REBOOT


@pytest.mark.django_db
def test_admitting_leaves_a_remediation_awaiting_approval_alone():
    """Only ``approve`` lets a remediation that waits for an operator act."""
    node = NodeFactory(state=NodeState.PRODUCTION)
    rem = Remediation.objects.create(
        node=node, status=S.AWAITING_APPROVAL, urgency=Urgency.NOW, rung=Rung.REBOOT, created=timezone.now()
    )
    assert services.admit(rem.pk).status == S.AWAITING_APPROVAL
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION


# --- Nothing else writes a status ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# The playground fabricates past history as rows (seeds, like the factories here), and tests set


def _in_a_fleet() -> Node:
    """A production node of a cluster of ten (one may leave under the default blast-radius limit)."""
    cluster = ClusterFactory()
    return NodeFactory.create_batch(10, cluster=cluster, state=NodeState.PRODUCTION)[0]


@pytest.mark.django_db
def test_skipping_a_rung_is_no_approval(operator, django_capture_on_commit_callbacks):
    """Skipping the rung of a remediation awaiting approval used to make it "running" with its node
    still in production: no approval given, nothing started, and nothing (reconciler included)
    ever moved it again. It keeps waiting for its approval, on the next rung."""
    node = _in_a_fleet()
    rem = Remediation.objects.create(node=node, status=S.AWAITING_APPROVAL, urgency=Urgency.NOW, rung=Rung.REBOOT)
    with django_capture_on_commit_callbacks(execute=True):
        services.skip_rung(rem.pk, actor=services.Actor(user=operator), reason="reboots never help this board")
    rem.refresh_from_db()
    node.refresh_from_db()
    assert (rem.status, rem.rung, node.state) == (S.AWAITING_APPROVAL, Rung.POWER_CYCLE, NodeState.PRODUCTION)
    with django_capture_on_commit_callbacks(execute=True):
        services.approve(rem.pk, actor=services.Actor(user=operator), reason="go")
    rem.refresh_from_db()
    node.refresh_from_db()
    assert rem.status == S.RUNNING and node.state == NodeState.REMEDIATING


@pytest.mark.django_db
def test_skipping_the_rung_of_a_queued_remediation_leaves_it_to_the_safety_rails(
    operator, django_capture_on_commit_callbacks
):
    """A remediation queued by a hold used to run (status "running", node in production, stuck for
    good) once its rung was skipped; it stays queued on the next rung until the hold is released."""
    node = _in_a_fleet()
    actor = services.Actor(user=operator)
    hold = services.place_hold(actor=actor, reason="firmware campaign", node_id=node.pk)
    rem = Remediation.objects.create(node=node, status=S.QUEUED, urgency=Urgency.NOW, rung=Rung.REBOOT)
    with django_capture_on_commit_callbacks(execute=True):
        services.skip_rung(rem.pk, actor=actor, reason="reboots never help this board")
        reconciler.reconcile()
    rem.refresh_from_db()
    assert (rem.status, rem.rung) == (S.QUEUED, Rung.POWER_CYCLE) and "hold" in rem.queued_reason.lower()
    services.release_hold(hold.pk, actor=actor, reason="campaign done")
    with django_capture_on_commit_callbacks(execute=False):
        reconciler.reconcile()
    rem.refresh_from_db()
    node.refresh_from_db()
    assert rem.status == S.RUNNING and node.state == NodeState.REMEDIATING


# rows up directly; the product's code moves statuses only through remediation.machine.
NOT_PRODUCT = ("tests", "sandbox", "agent", "deploy", "docs", "bin", "bench")


def _product_modules() -> list[Path]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith((*(f"{p}/" for p in NOT_PRODUCT), ".")) or "/migrations/" in rel:
            continue
        found.append(path)
    return found


def _touches_remediation(rel: str, tree: ast.Module) -> bool:
    if rel.startswith("remediation/"):
        return True
    return any(
        isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "remediation"
        for node in ast.walk(tree)
    )


def _status_writes(tree: ast.Module) -> list[int]:
    """Lines that assign ``<x>.status``, ``setattr(<x>, "status", ...)`` or ``update(status=...)``."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            elts = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
            if any(isinstance(e, ast.Attribute) and e.attr == "status" for e in elts):
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("update", "bulk_update") and any(k.arg == "status" for k in node.keywords):
                lines.append(node.lineno)
            if name == "setattr" and len(node.args) > 1 and getattr(node.args[1], "value", None) == "status":
                lines.append(node.lineno)
    return lines


def test_no_code_writes_a_remediation_status_outside_the_machine():
    offenders = []
    for path in _product_modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "remediation/machine.py":
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        if _touches_remediation(rel, tree):
            offenders += [f"{rel}:{line}" for line in _status_writes(tree)]
    assert offenders == [], "write statuses with remediation.machine.move / move_steps"


def test_the_code_reader_sees_a_raw_write():
    """The reader above is not blind: each form of a raw write is caught."""
    for source in (
        "rem.status = Status.RUNNING",
        "rem.status, rem.finished = Status.STOPPED, now",
        "Remediation.objects.filter(pk=1).update(status='failed')",
        "setattr(rem, 'status', 'failed')",
    ):
        assert _status_writes(ast.parse(source)) == [1], source


def test_it_scans_the_remediation_code():
    scanned = {p.relative_to(ROOT).as_posix() for p in _product_modules()}
    assert {"remediation/services.py", "remediation/reconciler.py", "remediation/ladder.py"} <= scanned
