"""The remediation's two state machines, declared: which status a remediation (and each of its
steps) may move to from which. ``move`` and ``move_steps`` are the only code that writes a status;
each checks the table first and refuses an illegal move with ``IllegalMove`` (a 409 at the edges,
like the node's ``TransitionNotAllowed``). A test walks every (from, to) pair of both tables, and
another reads the code for any other write of a status (tests/remediation/test_machine.py).

The tables say what the services do (remediation.services names the verb of each move):

- a remediation is created QUEUED (``consider_finding``); it waits for approval, is admitted
  (DRAINING, or RUNNING once the node is out; or FENCED, when one GPU is fenced instead of
  draining the node: ``services.fence_instead``), is queued again by a rail (hold, window,
  confirmation), runs a rung, re-validates, climbs (RUNNING again), and ends HANDED_OFF,
  SUCCEEDED, CLEARED (stood down), FENCED, STOPPED (operator, other hands, shadow policy) or FAILED;
- a step is created RUNNING (``start_rung``); its action done it VERIFYING, and re-validation
  passes or fails it; a stop or a skip skips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import QuerySet
from django_fsm import TransitionNotAllowed

from .choices import Status, StepStatus

S = Status
# from -> the statuses it may move to. A status missing from a row's set is refused; the final
# statuses (choices.DONE) have none. A self-move is listed where a verb re-records the same status
# with a new reason or rung (a queued one queued again, a climb from a running rung).
MOVES: Mapping[str, frozenset[str]] = {
    S.QUEUED: frozenset(
        {S.QUEUED, S.AWAITING_APPROVAL, S.DRAINING, S.RUNNING, S.HANDED_OFF, S.CLEARED, S.FENCED, S.STOPPED, S.FAILED}
    ),
    # Approved, it is queued (then admitted as any queued one): never straight to acting.
    S.AWAITING_APPROVAL: frozenset({S.QUEUED, S.STOPPED, S.FAILED}),
    S.DRAINING: frozenset({S.QUEUED, S.RUNNING, S.HANDED_OFF, S.CLEARED, S.STOPPED}),
    S.RUNNING: frozenset({S.QUEUED, S.RUNNING, S.VALIDATING, S.HANDED_OFF, S.STOPPED, S.FAILED}),
    S.VALIDATING: frozenset({S.RUNNING, S.SUCCEEDED, S.STOPPED}),
    S.HANDED_OFF: frozenset(),
    S.SUCCEEDED: frozenset(),
    S.CLEARED: frozenset(),
    S.FENCED: frozenset(),
    S.STOPPED: frozenset(),
    S.FAILED: frozenset(),
}
INITIAL = S.QUEUED

T = StepStatus
STEP_MOVES: Mapping[str, frozenset[str]] = {
    T.RUNNING: frozenset({T.VERIFYING, T.FAILED, T.SKIPPED}),
    T.VERIFYING: frozenset({T.PASSED, T.FAILED, T.SKIPPED}),
    T.PASSED: frozenset(),
    T.FAILED: frozenset(),
    T.SKIPPED: frozenset(),
}
STEP_INITIAL = T.RUNNING


class RemediationConflict(Exception):
    """The remediation's state does not allow this (the API answers 409)."""


class IllegalMove(RemediationConflict, TransitionNotAllowed):
    """A status change the table does not declare: a bug, or a remediation that moved on meanwhile."""


def may_move(source: str, target: str) -> bool:
    return target in MOVES.get(source, frozenset())


def may_move_step(source: str, target: str) -> bool:
    return target in STEP_MOVES.get(source, frozenset())


def move(rem: Any, target: str) -> None:
    """Set the remediation's status to ``target`` if the table allows it from its status; the
    caller saves it (``services._decide``) in the same transaction as its decision row."""
    if not may_move(rem.status, target):
        raise IllegalMove(
            f"Remediation {rem.pk} cannot go from {rem.status} ({Status(rem.status).label.lower()}) "
            f"to {target} ({Status(target).label.lower()})."
        )
    rem.status = target


def move_steps(steps: QuerySet[Any], sources: Iterable[str], target: str, **fields: Any) -> int:
    """Compare-and-swap the steps that are in one of ``sources`` to ``target`` (with ``fields``),
    in one UPDATE; returns how many moved (0: another delivery moved them first). Every
    (source, target) pair must be in the table, whatever rows match."""
    sources = tuple(sources)
    illegal = [s for s in sources if not may_move_step(s, target)]
    if illegal or not sources:
        raise IllegalMove(f"A remediation step cannot go from {', '.join(illegal) or 'nothing'} to {target}.")
    return steps.filter(status__in=sources).update(status=target, **fields)
