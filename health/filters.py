"""One FilterSet per list: the alert page and /api/alerts/ share AlertFilterSet; /api/findings/ FindingFilterSet."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django.utils import timezone

from fleet.models import Cluster, Site, Tenant
from fleet.scoping import visible_tenants
from nodewarden.bounds import INT_MAX, SMALLINT_MAX
from nodewarden.filters import FilterSet, IntegerFilter, IsoDateTimeFilter

from .choices import AlertState, Severity
from .counts import silenced_q
from .models import Alert, Finding


def _tenant_choices(request: Any) -> QuerySet[Tenant]:
    return visible_tenants(request.user) if request is not None else Tenant.objects.all()


class AlertFilterSet(FilterSet):
    """Filter alerts by severity, state, place, owner; silenced alerts are hidden unless asked for."""

    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    state = django_filters.ChoiceFilter(choices=AlertState.choices)
    node = IntegerFilter(field_name="node_id")
    rule = django_filters.CharFilter()
    gpu = IntegerFilter(field_name="gpu_index", min_value=0, max_value=SMALLINT_MAX)
    site = django_filters.ModelChoiceFilter(
        queryset=Site.objects.all(), field_name="node__site", to_field_name="slug", empty_label="Any site"
    )
    cluster = django_filters.ModelChoiceFilter(
        queryset=Cluster.objects.all(), field_name="node__cluster", to_field_name="name", empty_label="Any cluster"
    )
    # Scoped choices: a customer probing another tenant's slug gets "invalid choice", not an empty list.
    tenant = django_filters.ModelChoiceFilter(
        queryset=_tenant_choices, field_name="node__tenant", to_field_name="slug", empty_label="Any tenant"
    )
    acknowledged = django_filters.BooleanFilter(method="filter_acknowledged")
    show_silenced = django_filters.BooleanFilter(method="filter_silenced", label="Show silenced")

    class Meta:
        model = Alert
        fields = [
            "severity",
            "state",
            "node",
            "rule",
            "gpu",
            "site",
            "cluster",
            "tenant",
            "acknowledged",
            "show_silenced",
        ]

    def filter_acknowledged(self, queryset: QuerySet[Alert], name: str, value: bool | None) -> QuerySet[Alert]:
        if value is None:
            return queryset
        return queryset.filter(acknowledged_at__isnull=not value)

    def filter_silenced(self, queryset: QuerySet[Alert], name: str, value: bool | None) -> QuerySet[Alert]:
        if value:
            return queryset
        return queryset.exclude(silenced_q(timezone.now()))  # the rule health.counts counts by

    @property
    def qs(self) -> QuerySet[Alert]:
        # Silenced alerts are hidden by default, i.e. also when show_silenced is absent.
        queryset: QuerySet[Alert] = super().qs  # django-filter has no type information
        if self.form.cleaned_data.get("show_silenced") is None:
            queryset = self.filter_silenced(queryset, "show_silenced", False)
        return queryset


class FindingFilterSet(FilterSet):
    """Filter findings by node, severity, rule, GPU, time and shadow mode."""

    node = IntegerFilter(field_name="node_id")
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    rule = django_filters.CharFilter()
    gpu = IntegerFilter(field_name="gpu_index", min_value=0, max_value=SMALLINT_MAX)
    xid = IntegerFilter(min_value=0, max_value=INT_MAX)
    since = IsoDateTimeFilter(field_name="created", lookup_expr="gte")
    shadow = django_filters.BooleanFilter()

    class Meta:
        model = Finding
        fields = ["node", "severity", "rule", "gpu", "xid", "since", "shadow"]
