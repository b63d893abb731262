"""A catastrophic finding's task cordons the node and nothing more: the rung starts in a task of its own.

In a burst of catastrophic findings the workers take the findings in order; when each finding's
task also ran the rung's start (a step, a BMC call queued, or a repair ticket's hand-off), the
last node of the burst was cordoned only after the rungs of all the others had started.
"""

from __future__ import annotations

import pytest

from health.services import raise_finding
from nodes.choices import NodeState
from remediation import services, tasks
from remediation.choices import Status
from remediation.models import Remediation, RemediationStep
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db


def test_considering_a_catastrophic_finding_cordons_and_queues_the_rung_for_its_own_task(
    django_capture_on_commit_callbacks, monkeypatch
):
    node = NodeFactory.create_batch(10, cluster=ClusterFactory(), state=NodeState.PRODUCTION)[0]
    finding = raise_finding(
        node.pk, rule="xid", severity="catastrophic", xid=79, subject="xid:79", summary="XID 79: fallen off the bus"
    )
    started: list[int] = []
    monkeypatch.setattr(tasks.start_rungs, "apply_async", lambda args, **kw: started.extend(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        services.consider_finding(finding.pk)
    node.refresh_from_db()
    rem = Remediation.objects.get(node=node)
    assert node.state == NodeState.TRIAGE  # cordoned at once
    assert not RemediationStep.objects.filter(remediation=rem).exists()  # the rung has not started here
    assert started == [rem.pk]
    tasks.start_rung(rem.pk)  # the worker's turn
    rem.refresh_from_db()
    node.refresh_from_db()
    assert rem.status == Status.RUNNING and node.state == NodeState.REMEDIATING
    assert RemediationStep.objects.filter(remediation=rem).count() == 1
    tasks.start_rung(rem.pk)  # a second delivery changes nothing
    assert RemediationStep.objects.filter(remediation=rem).count() == 1
