"""Re-roling a node: drained, given the persona's configuration, re-validated with the
persona's stages and back in production, each step on the record."""

from __future__ import annotations

import pytest

from fleet.choices import SchedulerKind
from nodes.choices import NodeState, RunStatus
from nodes.models import NodeEvent
from nodes.services import Actor
from tests.factories import ClusterFactory, PersonaFactory
from validation import services
from validation.models import Day1Spec, PersonaChange
from validation.personas import request_persona_change

from .conftest import idle_report, send

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def inference(db):
    return PersonaFactory(
        name="inference",
        boot_image="ubuntu-24.04-inference",
        slurm_partition="infer",
        validation_stages=["inventory", "reliability"],
    )


def test_a_production_node_is_drained_reconfigured_revalidated_and_returned(node_in, inference, operator, eager):
    cluster = ClusterFactory(scheduler_kind=SchedulerKind.NONE)  # no job to wait for: the drain completes at once
    node = node_in(S.PRODUCTION, cluster=cluster, persona=PersonaFactory(name="training"))
    Day1Spec.objects.create(hardware_profile=node.hardware_profile, soak_seconds=0)
    with eager():
        change = request_persona_change(node.pk, inference.pk, actor=Actor(user=operator), reason="more inference")
    node.refresh_from_db()
    change.refresh_from_db()
    assert node.persona == inference and change.status == PersonaChange.Status.VALIDATING
    assert node.state == S.INVENTORY_CHECK  # firmware is not among the persona's stages: skipped
    transitions = list(
        NodeEvent.objects.filter(node=node, kind="transition")
        .order_by("created", "id")
        .values_list("transition", flat=True)
    )
    assert transitions[:5] == ["request_drain", "start_draining", "complete_drain", "revalidate", "pass_firmware"]
    config = NodeEvent.objects.get(node=node, reason="Persona set to inference").details["persona_config"]
    assert config["boot_image"] == "ubuntu-24.04-inference" and config["slurm_partition"] == "infer"

    send(node, idle_report(node))
    with eager():
        services.advance_open_stages()
    node.refresh_from_db()
    change.refresh_from_db()
    assert node.state == S.PRODUCTION and change.status == PersonaChange.Status.DONE
    statuses = list(node.runs.filter(kind__startswith="stage_").order_by("created", "id").values_list("kind", "status"))
    assert statuses == [
        ("stage_firmware", RunStatus.SKIPPED),
        ("stage_inventory", RunStatus.PASSED),
        ("stage_burn_in", RunStatus.SKIPPED),
        ("stage_fabric", RunStatus.SKIPPED),
        ("stage_reliability", RunStatus.PASSED),
    ]


def test_a_node_under_a_slurm_job_keeps_its_persona_until_the_drain_completes(
    node_in, inference, operator, eager, busy_scheduler
):
    node = node_in(S.PRODUCTION, cluster=ClusterFactory(scheduler_kind=SchedulerKind.SLURM))
    with eager():
        change = request_persona_change(node.pk, inference.pk, actor=Actor(user=operator), reason="re-role")
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING and node.persona is None and change.status == PersonaChange.Status.DRAINING


def test_one_re_role_at_a_time_and_never_to_the_same_persona(node_in, inference, operator):
    node = node_in(S.TRIAGE, persona=inference)
    with pytest.raises(services.StageConflict, match="already has persona inference"):
        request_persona_change(node.pk, inference.pk, actor=Actor(user=operator), reason="x")
    other = node_in(S.PRODUCTION, cluster=ClusterFactory(scheduler_kind=SchedulerKind.SLURM))
    request_persona_change(other.pk, inference.pk, actor=Actor(user=operator), reason="x")
    with pytest.raises(services.StageConflict, match="already being re-roled"):
        request_persona_change(other.pk, PersonaFactory(name="training").pk, actor=Actor(user=operator), reason="y")


def test_a_node_in_maintenance_is_not_re_roled_until_maintenance_ends(node_in, inference, operator):
    node = node_in(S.MAINTENANCE)
    with pytest.raises(services.StageConflict, match="in maintenance: end maintenance first"):
        request_persona_change(node.pk, inference.pk, actor=Actor(user=operator), reason="x")
    assert not PersonaChange.objects.exists()


def test_a_node_not_yet_serving_takes_the_persona_at_once(node_in, inference, operator):
    node = node_in(S.BURN_IN)
    change = request_persona_change(node.pk, inference.pk, actor=Actor(user=operator), reason="assigned early")
    node.refresh_from_db()
    assert node.persona == inference and change.status == PersonaChange.Status.DONE and node.state == S.BURN_IN


def test_a_viewer_may_not_re_role(node_in, inference, viewer):
    with pytest.raises(services.StageForbidden):
        request_persona_change(node_in(S.PRODUCTION).pk, inference.pk, actor=Actor(user=viewer), reason="x")


def test_the_api_re_roles_and_refuses_clearly(node_in, inference, operator):
    from django.urls import reverse
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(operator)
    node = node_in(S.PRODUCTION, cluster=ClusterFactory(scheduler_kind=SchedulerKind.SLURM))
    url = reverse("api:node-persona", args=[node.pk])
    assert client.post(url, {"persona": "nope", "reason": "x"}).json()["fields"] == {"persona": ["No persona 'nope'."]}
    response = client.post(url, {"persona": "inference", "reason": "capacity"})
    assert response.status_code == 201 and response.json()["status"] == "draining"
    assert client.post(url, {"persona": "inference", "reason": "again"}).status_code == 409
