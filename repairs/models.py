"""Repair tickets, RMA cases, their append-only history, and outgoing webhooks.

The two lifecycles are declared here; transition methods only check and set fields.
Locking, saving, history, the node's own state and webhooks belong to
``repairs.services``, the only road to a change of a ticket or a case.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, Transition, transition

from nodes.models import OPERATE, Node
from nodewarden.records import AppendOnlyQuerySet

from .choices import EVENT_STATE_CHOICES, DeliveryStatus, RmaOutcome, RmaState, TicketState, WebhookEvent

T, R = TicketState, RmaState


def _meta(label: str, style: str = "primary") -> dict[str, Any]:
    return {"label": label, "style": style}


class RepairTicket(ConcurrentTransitionMixin, models.Model):
    """A technician's job on one node: what to check or replace, and where it is.

    The place (site, rack, unit) and hostname are copied when the ticket opens, so the
    ticket still says where the technician went after the node moves or is renamed.
    """

    if TYPE_CHECKING:  # as on nodes.models.Node: django-fsm-2's mixin __init__ is Any to mypy on 3.11

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def get_available_user_state_transitions(self, user: Any) -> Iterator[Transition]: ...

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="repair_tickets")
    hostname = models.CharField(max_length=253)
    component = models.CharField(max_length=200, help_text='e.g. "GPU 3 (serial 1650...)", "DIMM B4", "PSU 2".')
    what = models.TextField(help_text="What to check or replace.")
    site = models.CharField(max_length=100, blank=True, help_text="Site slug at open time.")
    rack = models.CharField(max_length=100, blank=True, help_text="Rack name at open time.")
    rack_unit = models.PositiveSmallIntegerField(null=True, blank=True)
    state = FSMField(choices=TicketState.choices, default=TicketState.OPEN, protected=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    opened_by_name = models.CharField(max_length=150, help_text="Username, or system:<component>.")
    assignee = models.CharField(max_length=150, blank=True, help_text="Technician (free text).")
    notes = models.TextField(blank=True)
    # Links to other apps' records by id only, so this app imports neither.
    finding_id = models.PositiveBigIntegerField(null=True, blank=True, db_index=True)
    remediation_id = models.PositiveBigIntegerField(null=True, blank=True, db_index=True)
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(auto_now=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["node", "state"]),
            models.Index(fields=["state", "-created"]),
            models.Index(fields=["-created"]),
        ]

    def __str__(self) -> str:
        return f"Repair #{self.pk} {self.hostname}: {self.component}"

    @transition(field=state, source=T.OPEN, target=T.IN_PROGRESS, permission=OPERATE, custom=_meta("Start work"))
    def start(self) -> None:
        """A technician is on it."""

    @transition(
        field=state, source=T.IN_PROGRESS, target=T.RESOLVED, permission=OPERATE, custom=_meta("Resolve", "success")
    )
    def resolve(self) -> None:
        """The part was checked or replaced; the node goes back through Day 1."""
        self.resolved_at = timezone.now()

    @transition(
        field=state,
        source=[T.OPEN, T.IN_PROGRESS],
        target=T.CANCELLED,
        permission=OPERATE,
        custom=_meta("Cancel", "danger"),
    )
    def cancel(self) -> None:
        """Not needed after all (opened by mistake, or superseded)."""


class RmaCase(ConcurrentTransitionMixin, models.Model):
    """A part returned to its vendor: serials in and out, the vendor's case, the outcome."""

    if TYPE_CHECKING:  # as on nodes.models.Node: django-fsm-2's mixin __init__ is Any to mypy on 3.11

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def get_available_user_state_transitions(self, user: Any) -> Iterator[Transition]: ...

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="rma_cases")
    hostname = models.CharField(max_length=253)
    vendor = models.CharField(max_length=100)
    part = models.CharField(max_length=200, help_text='e.g. "H100 80GB SXM5", "ConnectX-7 HCA".')
    failed_serial = models.CharField(max_length=100)
    replacement_serial = models.CharField(max_length=100, blank=True)
    vendor_case_number = models.CharField(max_length=100, blank=True)
    state = FSMField(choices=RmaState.choices, default=RmaState.OPENED, protected=True)
    outcome = models.CharField(max_length=20, choices=RmaOutcome.choices, blank=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    opened_by_name = models.CharField(max_length=150, help_text="Username, or system:<component>.")
    notes = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(auto_now=True)
    shipped_at = models.DateTimeField(null=True, blank=True)
    returned_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "RMA case"
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["node", "state"]),
            models.Index(fields=["state", "-created"]),
            models.Index(fields=["-created"]),
        ]

    def __str__(self) -> str:
        return f"RMA #{self.pk} {self.vendor} {self.part} ({self.failed_serial})"

    @transition(field=state, source=R.OPENED, target=R.SHIPPED, permission=OPERATE, custom=_meta("Mark shipped"))
    def ship(self) -> None:
        """The failed part left for the vendor."""
        self.shipped_at = timezone.now()

    @transition(field=state, source=R.SHIPPED, target=R.RETURNED, permission=OPERATE, custom=_meta("Mark received"))
    def receive(self, outcome: str, replacement_serial: str) -> None:
        """The vendor answered: a part (new, repaired or the same) came back, or the claim was denied."""
        self.outcome, self.replacement_serial = outcome, replacement_serial
        self.returned_at = timezone.now()

    @transition(field=state, source=R.RETURNED, target=R.CLOSED, permission=OPERATE, custom=_meta("Close", "success"))
    def close(self) -> None:
        """The part is back in the node; the node goes back through Day 1."""
        self.closed_at = timezone.now()

    @transition(
        field=state,
        source=[R.OPENED, R.SHIPPED],
        target=R.CANCELLED,
        permission=OPERATE,
        custom=_meta("Cancel", "danger"),
    )
    def cancel(self) -> None:
        """No return after all."""
        self.closed_at = timezone.now()


class RepairEvent(models.Model):
    """One append-only change of a ticket or an RMA case: from, to, who, why.

    Ticket, case, node and actor are kept as foreign keys and (node, actor) as copied
    names, so the record outlives a deleted user.
    """

    ticket = models.ForeignKey(RepairTicket, on_delete=models.PROTECT, null=True, blank=True, related_name="events")
    rma_case = models.ForeignKey(RmaCase, on_delete=models.PROTECT, null=True, blank=True, related_name="events")
    node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, related_name="+")
    hostname = models.CharField(max_length=253)
    verb = models.CharField(max_length=20)
    from_state = models.CharField(max_length=20, choices=EVENT_STATE_CHOICES, blank=True)
    to_state = models.CharField(max_length=20, choices=EVENT_STATE_CHOICES)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_name = models.CharField(max_length=150, help_text="Username, or system:<component>.")
    reason = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(default=timezone.now)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["created", "id"]
        indexes = [models.Index(fields=["ticket", "created"]), models.Index(fields=["rma_case", "created"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ticket__isnull=False, rma_case__isnull=True)
                | models.Q(ticket__isnull=True, rma_case__isnull=False),
                name="repair_event_is_for_a_ticket_or_a_case",
            )
        ]

    def __str__(self) -> str:
        subject = f"ticket #{self.ticket_id}" if self.ticket_id else f"RMA #{self.rma_case_id}"
        return f"{subject}: {self.from_state or '-'} -> {self.to_state}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise PermissionError("Repair history is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("Repair history is append-only")


class WebhookEndpoint(models.Model):
    """An external system (ticketing, chat) told about ticket and case changes, signed with HMAC-SHA256."""

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200, help_text="Shared secret of the X-Nodewarden-Signature header.")
    events = models.JSONField(default=list, blank=True, help_text="Subscribed events; empty = none.")
    active = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        unknown = set(self.events or []) - set(WebhookEvent.values)
        if not isinstance(self.events, list) or unknown:
            raise ValidationError({"events": f"Unknown events: {', '.join(sorted(map(str, unknown)))}."})


class WebhookDelivery(models.Model):
    """One event for one endpoint: written with the change (an outbox), sent after commit, retried."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=30, choices=WebhookEvent.choices)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["-created", "-id"]
        # The beat sweep's query: due pending deliveries, oldest first.
        indexes = [models.Index(fields=["status", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} -> {self.endpoint_id} ({self.status})"
