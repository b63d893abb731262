"""The end of an operator's maintenance walks the Day 1 stages that what was done calls for (the same
stage runs as any re-validation): nothing touched, the inventory check only; a failed stage sends the
node to triage as usual. Plans are ``validation.choices.MAINTENANCE_PLANS`` unless a
``RevalidationPlan`` row says otherwise."""

from __future__ import annotations

import pytest

from nodes import services as node_services
from nodes.choices import MaintenanceWork, NodeState, RunStatus
from nodes.models import Run
from nodes.services import Actor
from validation import services
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan

from .conftest import idle_report, send

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def spec(db):
    from tests.factories import HardwareProfileFactory

    return Day1Spec.objects.create(hardware_profile=HardwareProfileFactory(), soak_seconds=0)


def stage_statuses(node) -> list[str]:
    return list(
        Run.objects.filter(node=node, kind__startswith="stage_")
        .order_by("created", "id")
        .values_list("status", flat=True)
    )


def end(node, operator, work) -> None:
    node_services.end_maintenance(node.pk, actor=Actor(user=operator), reason="work done", work=work)


def test_nothing_touched_walks_the_inventory_check_only_then_production(node_in, spec, eager, operator):
    node = node_in(S.MAINTENANCE, hardware_profile=spec.hardware_profile)
    with eager():
        end(node, operator, MaintenanceWork.NONE)
    node.refresh_from_db()
    assert node.state == S.INVENTORY_CHECK  # firmware skipped: not in the plan
    assert services.planned_stages(node.pk) == (Reentry.MAINTENANCE_NONE, [Stage.INVENTORY])
    send(node, idle_report(node))
    with eager():
        services.advance_open_stages()
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not node.is_revalidation
    assert stage_statuses(node) == [RunStatus.SKIPPED, RunStatus.PASSED, *[RunStatus.SKIPPED] * 3]


def test_a_failed_stage_of_the_plan_goes_to_triage(node_in, spec, eager, operator):
    node = node_in(S.MAINTENANCE, hardware_profile=spec.hardware_profile)
    with eager():
        end(node, operator, MaintenanceWork.FIRMWARE)  # firmware is in this plan: no BMC, it fails
    node.refresh_from_db()
    assert node.state == S.TRIAGE and stage_statuses(node) == [RunStatus.FAILED]


@pytest.mark.parametrize(
    ("work", "stages"),
    [
        (MaintenanceWork.NONE, [Stage.INVENTORY]),
        (MaintenanceWork.FIRMWARE, [Stage.FIRMWARE, Stage.INVENTORY, Stage.BURN_IN]),
        (MaintenanceWork.HARDWARE, [Stage.INVENTORY, Stage.BURN_IN, Stage.FABRIC, Stage.RELIABILITY]),
        (MaintenanceWork.OTHER, list(Stage.values)),
    ],
)
def test_what_was_done_picks_the_plan(node_in, operator, work, stages):
    node = node_in(S.MAINTENANCE)
    end(node, operator, work)  # follow-ups not run: only the plan is read
    assert services.planned_stages(node.pk) == (f"maintenance_{work}", stages)


def test_a_plan_row_overrides_the_default(node_in, operator):
    RevalidationPlan.objects.create(reentry=Reentry.MAINTENANCE_NONE, stages=[Stage.INVENTORY, Stage.BURN_IN])
    node = node_in(S.MAINTENANCE)
    end(node, operator, MaintenanceWork.NONE)
    assert services.planned_stages(node.pk)[1] == [Stage.INVENTORY, Stage.BURN_IN]
