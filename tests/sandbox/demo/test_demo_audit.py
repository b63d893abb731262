"""The seeded demo fleet passes the fleet auditor: the seed writes the demo's past directly, so it
must leave only states the product's own rules allow (docs/auditor.md). The invariants are the
auditor's own (``audit.services.run_audit``); a scheduler or BMC that cannot be asked here counts
as unknown, never a breach."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
import time_machine
from django.core.management import call_command

from audit.choices import Invariant
from audit.services import run_audit
from health.choices import SEVERITY_RANK, AlertState, Severity
from health.models import Alert
from nodes.choices import NodeState
from remediation.choices import OPEN
from remediation.models import Remediation

pytestmark = pytest.mark.django_db
SEEDED_AT = datetime(2026, 3, 14, 15, 30, tzinfo=UTC)


@pytest.mark.parametrize("seed", ["7", "11"])
def test_the_seeded_fleet_breaks_none_of_the_auditors_invariants(seed):
    with time_machine.travel(SEEDED_AT, tick=False):
        call_command("seed_demo", "--nodes", "80", "--days", "30", "--seed", seed, stdout=io.StringIO())
        run = run_audit(source="test", findings=False)

    assert run.error == ""
    assert run.counts[Invariant.UNHANDLED_ALERT]["breaches"] == 0, run.breaches
    assert run.breach_total == 0, run.breaches


def test_no_seeded_production_node_shows_a_firing_serious_alert_nothing_acts_on():
    """Stricter than the auditor's grace: at the seed's end, a production node with a firing alert at or
    above degraded has an open remediation acting on it (a customer sees its node's alerts)."""
    with time_machine.travel(SEEDED_AT, tick=False):
        call_command("seed_demo", "--nodes", "80", "--days", "30", "--seed", "7", stdout=io.StringIO())

    firing = Alert.objects.filter(
        state=AlertState.FIRING, severity_rank__gte=SEVERITY_RANK[Severity.DEGRADED], node__state=NodeState.PRODUCTION
    ).exclude(node__in=Remediation.objects.filter(status__in=OPEN).values("node"))
    assert list(firing.values_list("node__hostname", "summary")) == []
