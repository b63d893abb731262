"""The node page header of a node in Day 1: the stage that runs, since when and until when it may,
and the stages of its plan still ahead (re-validation walks only its plan's)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from nodes import services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import Run
from tests.factories import NodeFactory
from validation.choices import Reentry, Stage
from validation.models import RevalidationPlan

pytestmark = pytest.mark.django_db
OPERATOR = services.Actor.system("test")


def _fact(client, node, key: str) -> str:
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    start = html.index(f'data-fact="{key}"', html.index('id="why-here"'))
    return html[start : html.index("</dd>", start)]


def test_a_revalidating_node_shows_its_stage_run_deadline_and_the_plans_stages_ahead(client, operator, eager):
    RevalidationPlan.objects.create(reentry=Reentry.REPAIR, stages=[Stage.INVENTORY, Stage.BURN_IN, Stage.RELIABILITY])
    node = NodeFactory(state=NodeState.REPAIR)
    with eager():
        services.revalidate(node.pk, actor=OPERATOR, reason="Repair ticket #1 resolved")
    node.refresh_from_db()
    assert node.state == NodeState.INVENTORY_CHECK
    run = Run.objects.filter(node=node, kind=RunKind.STAGE_INVENTORY).latest("created")
    client.force_login(operator)
    line = _fact(client, node, "validation")
    assert "Inventory check (re-validation, plan back from repair)" in line
    assert f"run {run.pk} {RunStatus(run.status).label.lower()} since" in line
    # Fabric is not in the plan: it is not announced.
    assert "Next: Burn-in, Reliability assessment, then production." in line
    assert "Next step due by" in line  # the stage's timeout: when it fails as stuck


def test_a_first_validation_at_its_last_stage_says_production_comes_next(client, operator):
    node = NodeFactory(state=NodeState.RELIABILITY_ASSESSMENT)
    client.force_login(operator)
    line = _fact(client, node, "validation")
    assert "Reliability assessment (first validation): no run open yet. Next: production." in line
