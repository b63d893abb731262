"""States of repair tickets and RMA cases, outcomes and webhook events, with their labels and
badge colours: the one place pages, filters, the API, the CSV export and webhooks read them."""

from __future__ import annotations

from django.db import models


class TicketState(models.TextChoices):
    """Where a technician's ticket is: open -> in progress -> resolved (or cancelled)."""

    OPEN = "open", "Open"
    IN_PROGRESS = "in_progress", "In progress"
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"


class RmaState(models.TextChoices):
    """Where a return to the vendor is: opened -> shipped -> returned -> closed (or cancelled)."""

    OPENED = "opened", "Opened"
    SHIPPED = "shipped", "Shipped to vendor"
    RETURNED = "returned", "Returned by vendor"
    CLOSED = "closed", "Closed"
    CANCELLED = "cancelled", "Cancelled"


class RmaOutcome(models.TextChoices):
    """What the vendor did with the part."""

    REPLACED = "replaced", "Replaced"
    REPAIRED = "repaired", "Repaired"
    NO_FAULT_FOUND = "no_fault_found", "No fault found"
    DENIED = "denied", "Denied"


# Not finished: these block the node's return to validation and show on the node page.
OPEN_TICKET_STATES: tuple[str, ...] = (TicketState.OPEN, TicketState.IN_PROGRESS)
OPEN_RMA_STATES: tuple[str, ...] = (RmaState.OPENED, RmaState.SHIPPED, RmaState.RETURNED)

# Both kinds of record log their changes in RepairEvent; "cancelled" is shared.
EVENT_STATE_CHOICES: list[tuple[str, str]] = list({**dict(TicketState.choices), **dict(RmaState.choices)}.items())

STATE_COLOURS: dict[str, str] = {
    TicketState.OPEN: "#e0641e",
    TicketState.IN_PROGRESS: "#4a78c2",
    TicketState.RESOLVED: "#2e9e5b",
    TicketState.CANCELLED: "#8b95a5",
    RmaState.OPENED: "#e0641e",
    RmaState.SHIPPED: "#7b61c9",
    RmaState.RETURNED: "#4a78c2",
    RmaState.CLOSED: "#2e9e5b",
}
STATE_LABELS: dict[str, str] = dict(EVENT_STATE_CHOICES)


class WebhookEvent(models.TextChoices):
    """What an outgoing webhook may subscribe to."""

    TICKET_OPENED = "ticket.opened", "Ticket opened"
    TICKET_UPDATED = "ticket.updated", "Ticket updated (started, cancelled)"
    TICKET_RESOLVED = "ticket.resolved", "Ticket resolved"
    RMA_OPENED = "rma.opened", "RMA case opened"
    RMA_UPDATED = "rma.updated", "RMA case updated (shipped, returned, cancelled)"
    RMA_CLOSED = "rma.closed", "RMA case closed"


class DeliveryStatus(models.TextChoices):
    """A webhook delivery: waiting (or between retries), done, or given up."""

    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


# Which webhook event each verb raises.
TICKET_VERB_EVENTS: dict[str, str] = {
    "open": WebhookEvent.TICKET_OPENED,
    "start": WebhookEvent.TICKET_UPDATED,
    "resolve": WebhookEvent.TICKET_RESOLVED,
    "cancel": WebhookEvent.TICKET_UPDATED,
}
RMA_VERB_EVENTS: dict[str, str] = {
    "open": WebhookEvent.RMA_OPENED,
    "ship": WebhookEvent.RMA_UPDATED,
    "receive": WebhookEvent.RMA_UPDATED,
    "close": WebhookEvent.RMA_CLOSED,
    "cancel": WebhookEvent.RMA_UPDATED,
}
