"""Admin: tickets, cases and events are read-only; endpoints are editable with known events only;
a failed delivery can be retried now."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from nodes.choices import NodeState
from repairs.choices import DeliveryStatus, WebhookEvent
from repairs.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["repairticket", "rmacase", "repairevent", "webhookendpoint", "webhookdelivery"])
def test_every_model_has_an_admin_list(client, fleet_admin, node_in, ticket_on, case_on, model):
    node = node_in(NodeState.TRIAGE)
    ticket_on(node)
    case_on(node)
    client.force_login(fleet_admin)
    assert client.get(reverse(f"admin:repairs_{model}_changelist")).status_code == 200


def test_a_ticket_is_shown_with_its_events_and_cannot_be_edited_or_added(client, fleet_admin, node_in, ticket_on):
    ticket = ticket_on(node_in(NodeState.TRIAGE))
    client.force_login(fleet_admin)
    page = client.get(reverse("admin:repairs_repairticket_change", args=[ticket.pk]))
    assert page.status_code == 200 and b"XID 79: fell off the bus" in page.content
    assert client.get(reverse("admin:repairs_repairticket_add")).status_code == 403
    event = ticket.events.get()
    assert client.post(reverse("admin:repairs_repairevent_delete", args=[event.pk]), {"post": "yes"}).status_code == 403


def test_an_endpoint_subscribes_to_known_events(client, fleet_admin):
    client.force_login(fleet_admin)
    response = client.post(
        reverse("admin:repairs_webhookendpoint_add"),
        {
            "name": "itsm",
            "url": "https://itsm.example/hooks",
            "secret": "s3cret",
            "events": [WebhookEvent.TICKET_OPENED, WebhookEvent.RMA_CLOSED],
            "active": "on",
        },
    )
    assert response.status_code == 302
    assert WebhookEndpoint.objects.get().events == ["ticket.opened", "rma.closed"]


def test_retry_now_requeues_a_failed_delivery(client, fleet_admin):
    endpoint = WebhookEndpoint.objects.create(name="itsm", url="http://127.0.0.1:9/", secret="s", events=[])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint,
        event="ticket.opened",
        payload={},
        attempts=8,
        status=DeliveryStatus.FAILED,
        last_error="HTTP 500",
    )
    client.force_login(fleet_admin)
    response = client.post(
        reverse("admin:repairs_webhookdelivery_changelist"),
        {"action": "retry_now", ACTION_CHECKBOX_NAME: [delivery.pk]},
        follow=True,
    )
    assert b"1 delivery queued again." in response.content
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
