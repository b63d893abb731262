"""Bulk actions on the alert list (acknowledge, silence with one reason, alert by alert) and the
list grouped per node and component."""

from __future__ import annotations

import pytest
from django.urls import reverse

from health.choices import Severity
from health.models import Alert
from health.services import clear_condition, raise_finding
from nodes.choices import EventKind
from nodes.models import NodeEvent
from nodewarden.bulk import MAX_ITEMS
from repairs.models import RepairTicket
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu3(tenant):
    """Three alerts on GPU 3 of one node, one on another node."""
    node = NodeFactory(tenant=tenant, hostname="gpu-a-001")
    for rule, severity, summary in (
        ("xid", Severity.CATASTROPHIC, "XID 79 fallen off the bus"),
        ("gpu_temperature", Severity.WARNING, "GPU warm"),
        ("nvlink_down", Severity.DEGRADED, "2 of 18 NVLinks down"),
    ):
        raise_finding(node.pk, rule=rule, severity=severity, summary=summary, gpu_index=3)
    other = NodeFactory(hostname="gpu-b-001")
    raise_finding(other.pk, rule="gpu_temperature", severity=Severity.WARNING, summary="GPU warm", gpu_index=0)
    return node


def _post(client, alerts, **data):
    return client.post(reverse("alert-bulk"), {"ids": [a.pk for a in alerts], **data}, follow=True)


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_an_operator_acknowledges_three_alerts_of_one_gpu_at_once(client, operator, gpu3):
    alerts = list(Alert.objects.filter(node=gpu3))
    client.force_login(operator)

    response = _post(client, alerts, action="acknowledge", reason="on it, RMA likely")

    assert _messages(response) == ["3 acknowledged: " + ", ".join(f"gpu-a-001 GPU 3 {a.rule}" for a in alerts) + "."]
    for alert in Alert.objects.filter(node=gpu3):
        assert (alert.acknowledged_by, alert.acknowledged_note) == (operator, "on it, RMA likely")
    notes = NodeEvent.objects.filter(node=gpu3, kind=EventKind.NOTE)
    assert notes.count() == 3  # one audited note per alert, not one for the batch
    assert {n.details["alert_id"] for n in notes} == {a.pk for a in alerts}
    assert all(n.actor == operator and "on it, RMA likely" in n.reason for n in notes)
    assert not Alert.objects.exclude(node=gpu3).filter(acknowledged_at__isnull=False).exists()


def test_a_silence_on_a_selection_reports_the_resolved_one_as_refused(client, operator, gpu3):
    alerts = list(Alert.objects.filter(node=gpu3).order_by("id"))
    clear_condition(gpu3.pk, rule="nvlink_down", gpu_index=3, reason="links back")
    client.force_login(operator)

    response = _post(client, alerts, action="silence", minutes="60", reason="maintenance tonight")

    assert _messages(response) == [
        "2 silenced: gpu-a-001 GPU 3 xid, gpu-a-001 GPU 3 gpu_temperature.",
        f"1 refused: gpu-a-001 GPU 3 nvlink_down (Alert {alerts[2].pk} is already resolved.).",
    ]
    assert Alert.objects.filter(node=gpu3, silenced_reason="maintenance tonight").count() == 2


def test_viewers_and_customers_cannot_bulk_on_alerts(client, viewer, customer, gpu3):
    alerts = list(Alert.objects.filter(node=gpu3))
    for user in (viewer, customer):
        client.force_login(user)
        response = client.post(
            reverse("alert-bulk"), {"ids": [a.pk for a in alerts], "action": "acknowledge", "reason": "x"}
        )
        assert response.status_code == 403
    assert not Alert.objects.filter(acknowledged_at__isnull=False).exists()


def test_over_the_bound_or_without_a_reason_nothing_is_done(client, operator, gpu3):
    alert = Alert.objects.filter(node=gpu3).first()
    client.force_login(operator)
    ids = [alert.pk, *range(10**6, 10**6 + MAX_ITEMS)]
    response = client.post(reverse("alert-bulk"), {"ids": ids, "action": "acknowledge", "reason": "x"})
    assert response.status_code == 400 and f"At most {MAX_ITEMS}" in response.content.decode()
    response = _post(client, [alert], action="silence", minutes="999999", reason="x")
    assert _messages(response) == ["A silence lasts from one minute to 30 days. Nothing was done."]
    response = _post(client, [alert], action="acknowledge", reason=" ")
    assert response.status_code == 400 and "A reason is required" in response.content.decode()
    assert (
        client.post(reverse("alert-bulk"), {"ids": [alert.pk], "action": "resolve", "reason": "x"}).status_code == 400
    )
    assert not Alert.objects.filter(acknowledged_at__isnull=False).exists()
    assert not Alert.objects.filter(silenced_until__isnull=False).exists()


def test_the_list_groups_related_alerts_per_node_and_component(client, operator, gpu3):
    client.force_login(operator)

    response = client.get(reverse("alert-list"), {"group": "node"})

    html = response.content.decode()
    assert [a.node.hostname for a in response.context["page"].object_list] == ["gpu-a-001"] * 3 + ["gpu-b-001"]
    assert html.count('class="group-head"') == 2
    assert "gpu-a-001 · GPU 3" in html and "gpu-b-001 · GPU 0" in html
    # worst first inside the group
    assert [a.rule for a in response.context["page"].object_list][:3] == ["xid", "nvlink_down", "gpu_temperature"]
    assert 'data-select-all="alert-bulk"' in html
    assert "group-head" not in client.get(reverse("alert-list")).content.decode()


def test_one_repair_ticket_per_node_and_component_each_alert_noted(client, operator, gpu3):
    alerts = list(Alert.objects.order_by("id"))  # three on gpu-a-001 GPU 3, one on gpu-b-001 GPU 0
    client.force_login(operator)

    response = _post(client, alerts, action="ticket", reason="swap GPU 3 tonight")

    assert _messages(response)[0].startswith("4 put on a repair ticket: gpu-a-001 GPU 3 xid, ")
    tickets = RepairTicket.objects.order_by("id")
    assert [(t.hostname, t.component) for t in tickets] == [("gpu-a-001", "GPU 3"), ("gpu-b-001", "GPU 0")]
    assert tickets[0].opened_by == operator and "XID 79" in tickets[0].what
    notes = NodeEvent.objects.filter(kind=EventKind.NOTE, details__alert_verb="ticketed")
    assert sorted(n.details["alert_id"] for n in notes) == sorted(a.pk for a in alerts)  # each alert audited
    assert {n.details["repair_ticket"] for n in notes if n.node_id == gpu3.pk} == {tickets[0].pk}
    assert all("swap GPU 3 tonight" in n.reason and n.actor == operator for n in notes)


def test_a_group_head_counts_its_alerts_with_the_worst_severity_and_first_and_last_seen(client, operator, gpu3):
    client.force_login(operator)

    html = client.get(reverse("alert-list"), {"group": "node"}).content.decode()

    head = html[html.index('<tr class="group-head" data-group="gpu-a-001"') :]
    head = head[: head.index("</tr>")]
    assert 'data-count="3"' in head and "3 alerts" in head
    assert 'data-worst="catastrophic"' in head and "Catastrophic" in head
    assert "first seen" in head and "last seen" in head
    group_key = f"{gpu3.pk}-3-"
    assert f'data-select-group="{group_key}"' in head
    # the rows keep their checkbox markup (name and value per alert), tagged with their group
    for alert in Alert.objects.filter(node=gpu3):
        assert f'name="ids" value="{alert.pk}" form="alert-bulk"' in html
    assert html.count(f'data-group-key="{group_key}"') == 4  # the head and its three rows


def test_each_row_shows_the_node_state_and_the_open_remediation_that_handles_it(client, operator, gpu3):
    from remediation.choices import Rung, Status, Urgency
    from remediation.models import Remediation

    xid = Alert.objects.get(node=gpu3, rule="xid")
    rem = Remediation.objects.create(
        node=gpu3, finding=xid.last_finding, status=Status.RUNNING, urgency=Urgency.NOW, rung=Rung.REBOOT
    )
    client.force_login(operator)

    html = client.get(reverse("alert-list")).content.decode()

    assert f'href="/nodes/{gpu3.pk}/#node-remediation" data-handles="alert">Remediation {rem.pk}: Running' in html
    assert html.count(f"Remediation {rem.pk}:") == 3  # every alert of the node names it ...
    assert html.count('data-handles="alert"') == 1  # ... and the XID one is the one it handles
    gpu3.refresh_from_db()
    # every row (four alerts on two nodes) with its node's state
    assert html.count(f'<div class="node-state"><span class="badge" data-state="{gpu3.state}"') == 4
