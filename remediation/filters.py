"""One FilterSet per list: the fleet page's open list and /api/remediations/ share
RemediationFilterSet; holds and circuit breakers have their own for /api/."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone

from fleet.models import Cluster
from nodewarden.filters import FilterSet, IntegerFilter

from .choices import OPEN, Rung, Status
from .models import CircuitBreaker, Hold, Remediation


class RemediationFilterSet(FilterSet):
    """Filter remediations by status (or open ones), rung, node and cluster."""

    status = django_filters.MultipleChoiceFilter(choices=Status.choices)
    open = django_filters.BooleanFilter(method="filter_open", label="Open only")
    rung = django_filters.MultipleChoiceFilter(choices=Rung.choices)
    node = IntegerFilter(field_name="node_id")
    cluster = django_filters.ModelChoiceFilter(
        queryset=Cluster.objects.all(), field_name="node__cluster", to_field_name="name", empty_label="Any cluster"
    )

    class Meta:
        model = Remediation
        fields = ["status", "open", "rung", "node", "cluster"]

    def filter_open(self, queryset: QuerySet[Remediation], name: str, value: bool | None) -> QuerySet[Remediation]:
        if value is None:
            return queryset
        return queryset.filter(status__in=OPEN) if value else queryset.exclude(status__in=OPEN)


class HoldFilterSet(FilterSet):
    """Holds by target, and active ones (not released, not expired)."""

    active = django_filters.BooleanFilter(method="filter_active")
    node = IntegerFilter(field_name="node_id")
    cluster = IntegerFilter(field_name="cluster_id")

    class Meta:
        model = Hold
        fields = ["active", "node", "cluster"]

    def filter_active(self, queryset: QuerySet[Hold], name: str, value: bool | None) -> QuerySet[Hold]:
        if value is None:
            return queryset
        active = Q(released_at__isnull=True) & (Q(until__isnull=True) | Q(until__gt=timezone.now()))
        return queryset.filter(active) if value else queryset.exclude(active)


class CircuitBreakerFilterSet(FilterSet):
    tripped = django_filters.BooleanFilter(field_name="reset_at", lookup_expr="isnull")
    cluster = IntegerFilter(field_name="cluster_id")

    class Meta:
        model = CircuitBreaker
        fields = ["tripped", "cluster"]
