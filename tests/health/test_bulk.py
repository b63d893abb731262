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
