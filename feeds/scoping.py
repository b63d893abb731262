"""Who sees which subscriptions and dead letters: staff all, a customer its tenant's only."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from fleet.scoping import is_operator_view, user_tenant_id

from .models import DeadLetter, Subscription


def visible_subscriptions(user: Any) -> QuerySet[Subscription]:
    if is_operator_view(user):
        return Subscription.objects.all()
    tenant_id = user_tenant_id(user) if user.is_authenticated else None
    return Subscription.objects.filter(tenant_id=tenant_id) if tenant_id else Subscription.objects.none()


def visible_dead_letters(user: Any) -> QuerySet[DeadLetter]:
    return DeadLetter.objects.filter(subscription__in=visible_subscriptions(user))
