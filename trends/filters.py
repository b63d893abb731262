"""One FilterSet for trend flags: the API's /api/trends/flags/ and the node page read it."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from nodewarden.filters import FilterSet, IntegerFilter

from .choices import FlagKind
from .models import TrendFlag


class TrendFlagFilterSet(FilterSet):
    """Flags by kind, node, figure, and open (not cleared) or cleared."""

    kind = django_filters.ChoiceFilter(choices=FlagKind.choices)
    node = IntegerFilter(field_name="node_id")
    figure = django_filters.CharFilter()
    open = django_filters.BooleanFilter(method="filter_open", label="Open only")

    class Meta:
        model = TrendFlag
        fields = ["kind", "node", "figure", "open"]

    def filter_open(self, queryset: QuerySet[TrendFlag], name: str, value: bool | None) -> QuerySet[TrendFlag]:
        if value is None:
            return queryset
        return queryset.filter(cleared_at__isnull=value)
