"""An operator's planned drain or maintenance ends in Maintenance, not in Triage (triage is for
findings), with who, when and why on the node page; ending it is a verb that says what was done.

The drain road runs through the real follow-ups (``eager``) with the cluster's "none" scheduler
(nothing runs on the node, so it drains at once); the real Slurm walk is in
tests/schedulers/test_maintenance_slurm.py, the re-validation plans in tests/validation.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django_fsm import TransitionNotAllowed

from nodes import services
from nodes.choices import TROUBLE_STATES, EventKind, MaintenanceWork, NodeState
from nodes.counts import node_counts
from nodes.models import Node, NodeEvent
from nodes.whyhere import why_here
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation
from tests.factories import NodeFactory
from tests.validation.conftest import eager  # noqa: F401  (fixture)

S = NodeState
SYSTEM = services.Actor.system("remediation")
pytestmark = pytest.mark.django_db


def changes(node) -> list[tuple[str, str, str, str]]:
    return list(
        NodeEvent.objects.filter(node=node, kind=EventKind.TRANSITION)
        .order_by("created", "id")
        .values_list("transition", "target_state", "actor_name", "reason")
    )


def test_start_maintenance_drains_after_the_job_and_lands_in_maintenance(operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    with eager():
        services.start_maintenance(node.pk, actor=services.Actor(user=operator), reason="Swap PSU B (DC-311)")
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
    walked = changes(node)
    assert walked[0] == ("start_maintenance", S.DRAIN_PENDING, operator.username, "Swap PSU B (DC-311)")
    assert [(t, target) for t, target, *_ in walked[1:]] == [
        ("start_draining", S.DRAINING),
        ("complete_drain", S.MAINTENANCE),
    ]
    last = NodeEvent.objects.filter(node=node, transition="complete_drain").get()
    assert last.details["maintenance_started_by"] == NodeEvent.objects.get(transition="start_maintenance").pk


def test_an_operators_plain_drain_ends_in_maintenance_not_triage(operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    with eager():
        services.request_drain(node.pk, actor=services.Actor(user=operator), reason="Customer asked for a reimage")
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE


def test_a_drain_for_a_finding_still_ends_in_triage(eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    with eager():
        services.request_drain(node.pk, actor=SYSTEM, reason="Remediation 3: XID 79 on GPU 2")
    node.refresh_from_db()
    assert node.state == S.TRIAGE


def test_an_operators_drain_a_remediation_waits_for_ends_in_triage(operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason="suspect DIMM")
    # A finding arrived meanwhile: its remediation joined the drain and starts its rung once drained.
    Remediation.objects.create(node=node, status=Status.DRAINING, urgency=Urgency.WHEN_IDLE, rung=Rung.REBOOT)
    assert services.planned_maintenance(node.pk) is None
    services.start_draining(node.pk, actor=SYSTEM, reason="No customer job running")
    services.complete_drain(node.pk, actor=SYSTEM, reason="drained")
    node.refresh_from_db()
    assert node.state == S.TRIAGE


def test_end_maintenance_says_what_was_done_and_refuses_outside_maintenance(operator):
    actor = services.Actor(user=operator)
    busy = NodeFactory(state=S.PRODUCTION)
    with pytest.raises(TransitionNotAllowed, match="in state 'Production'"):
        services.end_maintenance(busy.pk, actor=actor, reason="done", work=MaintenanceWork.NONE)
    node = NodeFactory(state=S.MAINTENANCE)
    with pytest.raises(ValueError, match="Unknown maintenance work 'lots'"):
        services.end_maintenance(node.pk, actor=actor, reason="done", work="lots")
    with pytest.raises(services.ReasonRequired):
        services.end_maintenance(node.pk, actor=actor, reason=" ", work=MaintenanceWork.NONE)
    assert not NodeEvent.objects.exists()
    event = services.end_maintenance(node.pk, actor=actor, reason="PSU swapped", work=MaintenanceWork.NONE)
    node.refresh_from_db()
    assert node.state == S.FIRMWARE_UPDATE and node.is_revalidation
    assert (event.transition, event.actor_name, event.reason) == ("end_maintenance", operator.username, "PSU swapped")
    assert event.details == {"maintenance_work": "none"}


def test_maintenance_is_out_of_production_but_not_trouble():
    assert S.MAINTENANCE not in TROUBLE_STATES
    NodeFactory(state=S.MAINTENANCE)
    NodeFactory(state=S.TRIAGE)
    counts = node_counts(Node.objects.all())
    assert (counts.in_maintenance, counts.in_trouble) == (1, 1)


def test_the_header_says_maintenance_since_when_by_whom_and_what_ends_it(client, operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    with eager():
        services.start_maintenance(node.pk, actor=services.Actor(user=operator), reason="Re-cable port 3")
    started = NodeEvent.objects.get(transition="start_maintenance").created
    node.refresh_from_db()
    [fact] = [f for f in why_here(node, operator=True).facts if f.key == "maintenance"]
    assert fact.text.startswith(f"Maintenance since {started:%Y-%m-%d %H:%M} UTC by {operator.username}: Re-cable")
    assert "End maintenance" in fact.text
    client.force_login(operator)
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert 'data-fact="maintenance"' in html and "Re-cable port 3" in html
    assert 'id="end-maintenance-form"' in html and 'value="hardware"' in html
    assert html.count('data-transition="end_maintenance"') == 1  # its own form, not a reason-only button


def test_the_node_page_starts_and_ends_maintenance(client, operator, eager):  # noqa: F811
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert 'data-transition="start_maintenance"' in page
    with eager():
        client.post(reverse("node-transition", args=[node.pk, "start_maintenance"]), {"reason": "BIOS setting"})
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
    url = reverse("node-end-maintenance", args=[node.pk])
    response = client.post(url, {"reason": "changed a BIOS setting", "work": "bogus"}, follow=True)
    assert "Unknown maintenance work" in response.content.decode()
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
    client.post(url, {"reason": "changed a BIOS setting", "work": "firmware"})
    node.refresh_from_db()
    assert node.state == S.FIRMWARE_UPDATE
    assert NodeEvent.objects.get(transition="end_maintenance").details == {"maintenance_work": "firmware"}
    response = client.post(url, {"reason": "again", "work": "none"}, follow=True)
    assert "Cannot end maintenance a node in state" in response.content.decode()


def test_a_viewer_cannot_end_maintenance(client, viewer):
    node = NodeFactory(state=S.MAINTENANCE)
    client.force_login(viewer)
    response = client.post(reverse("node-end-maintenance", args=[node.pk]), {"reason": "x", "work": "none"})
    assert response.status_code == 403
    node.refresh_from_db()
    assert node.state == S.MAINTENANCE
