"""One FilterSet per list: the fabric pages and /api/fabric/ share them."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from nodewarden.filters import FilterSet, IntegerFilter

from .choices import DiscrepancyKind, RunSource, RunStatus, TicketStatus, ValidationResult
from .models import DiscoveredLink, DiscoveryRun, Discrepancy, ManualValidation, Ticket
from .services import last_run


class DiscrepancyFilterSet(FilterSet):
    """Discrepancies by kind, run (the last run unless one is named) and endpoint text."""

    kind = django_filters.MultipleChoiceFilter(choices=DiscrepancyKind.choices)
    run = IntegerFilter(field_name="run_id", help_text="Run id; the last run when absent.")
    ticket = IntegerFilter(field_name="ticket_id")
    endpoint = django_filters.CharFilter(
        method="filter_endpoint", help_text='Part of a port, e.g. "leaf01/" or "gpu-node-03".'
    )

    class Meta:
        model = Discrepancy
        fields = ["kind", "run", "ticket", "endpoint"]

    def filter_endpoint(self, queryset: QuerySet[Discrepancy], name: str, value: str) -> QuerySet[Discrepancy]:
        return queryset.filter(Q(a_endpoint__icontains=value) | Q(b_endpoint__icontains=value)) if value else queryset

    @property
    def qs(self) -> QuerySet[Discrepancy]:
        # The default view is what the last run found: one run, not the whole history.
        queryset: QuerySet[Discrepancy] = super().qs  # django-filter has no type information
        data = self.form.cleaned_data
        if data.get("run") is None and data.get("ticket") is None:
            run = last_run()
            queryset = queryset.filter(run=run) if run is not None else queryset.none()
        return queryset


class TicketFilterSet(FilterSet):
    """Tickets by status, kind and a text search over the title and the ports."""

    status = django_filters.ChoiceFilter(choices=TicketStatus.choices)
    kind = django_filters.MultipleChoiceFilter(choices=DiscrepancyKind.choices)
    q = django_filters.CharFilter(method="filter_q", label="Search", help_text="Part of the title or of a port.")
    node = IntegerFilter(field_name="nodes", distinct=True)

    class Meta:
        model = Ticket
        fields = ["status", "kind", "q", "node"]

    def filter_q(self, queryset: QuerySet[Ticket], name: str, value: str) -> QuerySet[Ticket]:
        # The key holds every planned port of the problem ("link_down|gpu-node-03 mlx5_0/1|leaf02/1").
        return queryset.filter(Q(title__icontains=value) | Q(key__icontains=value)) if value else queryset


class RunFilterSet(FilterSet):
    source = django_filters.ChoiceFilter(choices=RunSource.choices)
    status = django_filters.ChoiceFilter(choices=RunStatus.choices)

    class Meta:
        model = DiscoveryRun
        fields = ["source", "status"]


class DiscoveredLinkFilterSet(FilterSet):
    """The last run's cables (and down ports); ``device`` names either end."""

    device = django_filters.CharFilter(method="filter_device", help_text='A device name, e.g. "leaf01".')

    class Meta:
        model = DiscoveredLink
        fields = ["device"]

    def filter_device(self, queryset: QuerySet[DiscoveredLink], name: str, value: str) -> QuerySet[DiscoveredLink]:
        return queryset.filter(Q(a_device__name=value) | Q(b_device__name=value)) if value else queryset


class ValidationFilterSet(FilterSet):
    result = django_filters.ChoiceFilter(choices=ValidationResult.choices)

    class Meta:
        model = ManualValidation
        fields = ["result"]
