"""The verbs of the event feed: subscribe and deactivate a webhook, redeliver dead letters.

A customer's user subscribes to its own tenant only: the tenant is forced to theirs, and naming
another is refused. Staff may subscribe to any tenant, or to the whole fleet.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db import transaction
from rest_framework.exceptions import PermissionDenied, ValidationError

from fleet.models import Cluster, Tenant
from fleet.scoping import is_operator_view, user_tenant_id

from . import delivery
from .addresses import AddressRefused, check_public
from .events import horizon
from .models import DeadLetter, Subscription


def subscribe(
    user: Any,
    *,
    url: str,
    tenant: Tenant | None = None,
    cluster: Cluster | None = None,
    event_types: list[str] | None = None,
    secret: str = "",
    description: str = "",
    from_start: bool = False,
) -> Subscription:
    """A new active subscription. It follows events from now on (the settled horizon), or from
    the first event with ``from_start`` (a backfill; the cursor API catches up as well)."""
    if not is_operator_view(user):
        own = user_tenant_id(user)
        if own is None or (tenant is not None and tenant.pk != own):
            raise PermissionDenied("A customer may subscribe to its own tenant's events only.")
        tenant = Tenant.objects.get(pk=own)
        try:
            check_public(url)
        except AddressRefused as exc:
            raise ValidationError({"url": [str(exc)]}) from None
    return Subscription.objects.create(
        url=url,
        tenant=tenant,
        cluster=cluster,
        event_types=sorted(set(event_types or [])),
        secret=secret or secrets.token_urlsafe(32),
        description=description,
        created_by=user,
        created_by_name=user.get_username(),
        cursor=0 if from_start else horizon(),
    )


def deactivate(subscription: Subscription) -> Subscription:
    """Stop delivering (kept, with its dead letters, for the record)."""
    with transaction.atomic():
        Subscription.objects.filter(pk=subscription.pk).update(active=False)
    subscription.refresh_from_db()
    return subscription


def redeliver(letter: DeadLetter) -> DeadLetter:
    """Queue a dead letter for the next sweep (a no-op unless it is dead)."""
    delivery.queue_redelivery([letter.pk])
    letter.refresh_from_db()
    return letter
