"""One FilterSet per list: the pages, the API lists and the CSV exports share them."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from nodewarden.filters import FilterSet, IntegerFilter

from .choices import RmaOutcome, RmaState, TicketState
from .models import RepairTicket, RmaCase


class RepairTicketFilterSet(FilterSet):
    """Tickets by state, place (as copied at open time), node, and a search of component and task."""

    state = django_filters.MultipleChoiceFilter(choices=TicketState.choices)
    site = django_filters.CharFilter(field_name="site", help_text="Site slug.")
    rack = django_filters.CharFilter(field_name="rack", help_text="Rack name.")
    node = IntegerFilter(field_name="node_id")
    q = django_filters.CharFilter(
        method="search", label="Search", help_text="Component, task, hostname or assignee contains this."
    )

    class Meta:
        model = RepairTicket
        fields = ["state", "site", "rack", "node", "q"]

    def search(self, queryset: QuerySet[RepairTicket], name: str, value: str) -> QuerySet[RepairTicket]:
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(
            Q(component__icontains=value)
            | Q(what__icontains=value)
            | Q(hostname__icontains=value)
            | Q(assignee__icontains=value)
        )


class RmaCaseFilterSet(FilterSet):
    """RMA cases by state, outcome, vendor, node, and a search of part, serials and case number."""

    state = django_filters.MultipleChoiceFilter(choices=RmaState.choices)
    outcome = django_filters.ChoiceFilter(choices=RmaOutcome.choices)
    vendor = django_filters.CharFilter(lookup_expr="iexact")
    node = IntegerFilter(field_name="node_id")
    q = django_filters.CharFilter(
        method="search", label="Search", help_text="Part, serials, vendor case number or hostname contains this."
    )

    class Meta:
        model = RmaCase
        fields = ["state", "outcome", "vendor", "node", "q"]

    def search(self, queryset: QuerySet[RmaCase], name: str, value: str) -> QuerySet[RmaCase]:
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(
            Q(part__icontains=value)
            | Q(failed_serial__icontains=value)
            | Q(replacement_serial__icontains=value)
            | Q(vendor_case_number__icontains=value)
            | Q(hostname__icontains=value)
        )
