"""One FilterSet for the node list page, its CSV export and the REST API."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant
from nodewarden.filters import FilterSet

from .choices import STATE_PHASE, TROUBLE_STATES, NodeState, Phase
from .models import GPU, Node
from .scoping import visible_tenants


def _tenant_choices(request: Any) -> QuerySet[Tenant]:
    return visible_tenants(request.user) if request is not None else Tenant.objects.all()


class NodeFilterSet(FilterSet):
    """Search by hostname, serial, GPU UUID or BMC address; filter by place, owner and state."""

    q = django_filters.CharFilter(method="search", label="Search")
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices, label="State")
    phase = django_filters.ChoiceFilter(choices=Phase.choices, method="filter_phase", label="Phase", empty_label="Any")
    in_trouble = django_filters.BooleanFilter(method="filter_in_trouble", label="In trouble")
    site = django_filters.ModelChoiceFilter(
        queryset=Site.objects.all(), field_name="site", to_field_name="slug", label="Site", empty_label="Any"
    )
    cluster = django_filters.ModelChoiceFilter(
        queryset=Cluster.objects.all(), field_name="cluster", to_field_name="name", label="Cluster", empty_label="Any"
    )
    rack = django_filters.ModelChoiceFilter(queryset=Rack.objects.all(), label="Rack", empty_label="Any")
    # Scoped choices: a customer probing another tenant's slug gets "invalid choice", not an empty list.
    tenant = django_filters.ModelChoiceFilter(
        queryset=_tenant_choices, field_name="tenant", to_field_name="slug", label="Tenant", empty_label="Any"
    )
    unassigned = django_filters.BooleanFilter(field_name="tenant", lookup_expr="isnull", label="Unassigned capacity")
    hardware_profile = django_filters.ModelChoiceFilter(
        queryset=HardwareProfile.objects.all(), label="Hardware profile", empty_label="Any"
    )
    persona = django_filters.ModelChoiceFilter(queryset=Persona.objects.all(), label="Persona", empty_label="Any")
    ordering = django_filters.OrderingFilter(
        fields=(
            ("hostname", "hostname"),
            ("serial", "serial"),
            ("state", "state"),
            ("state_changed_at", "state_changed_at"),
            ("site__name", "site"),
            ("cluster__name", "cluster"),
            ("tenant__name", "tenant"),
        ),
    )

    class Meta:
        model = Node
        fields = [
            "q",
            "state",
            "phase",
            "in_trouble",
            "site",
            "cluster",
            "rack",
            "tenant",
            "unassigned",
            "hardware_profile",
            "persona",
        ]

    def search(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        """Nodes whose hostname, serial, BMC address or one of whose GPUs' UUID starts with ``value``.

        A prefix, not a substring: ``istartswith`` reads the UPPER(column) pattern indexes
        (migration 0008) where ``icontains`` reads every row. The GPU match is a subquery on
        GPU's own index, so the list keeps one row per node and a fixed number of queries."""
        value = value.strip()
        if not value:
            return queryset
        # nvidia-smi's UUIDs start "GPU-"; an operator often pastes only what follows it.
        uuid = Q(uuid__istartswith=value) | Q(uuid__istartswith=f"GPU-{value}")
        own = Node.objects.filter(
            Q(hostname__istartswith=value) | Q(serial__istartswith=value) | Q(bmc_address__istartswith=value)
        )
        # A UNION of the two index reads, not one OR: an OR with a subquery on GPUs makes
        # PostgreSQL read every node row and probe the subquery for each.
        matches = own.order_by().values("pk").union(GPU.objects.filter(uuid).order_by().values("node_id"))
        return queryset.filter(pk__in=matches)

    def filter_phase(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        return queryset.filter(state__in=[s for s, p in STATE_PHASE.items() if p == value]) if value else queryset

    def filter_in_trouble(self, queryset: QuerySet[Node], name: str, value: bool | None) -> QuerySet[Node]:
        if value is None:
            return queryset
        return queryset.filter(state__in=TROUBLE_STATES) if value else queryset.exclude(state__in=TROUBLE_STATES)
