"""The base of every FilterSet: query parameters bounded by what the database can compare.

An integer filter refuses (400 naming the parameter) a value its column cannot hold, instead
of handing 2**70 to the database; a date-time filter refuses a UTC offset PostgreSQL refuses
(``nodewarden.bounds``). Declare ``IntegerFilter``/``IsoDateTimeFilter`` from here, never
django-filter's ``NumberFilter``: tests/api/test_bad_input.py checks every FilterSet.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import django_filters
import django_filters.rest_framework
from django import forms
from django.core.validators import MaxValueValidator
from django.db import connection, models
from django_filters.fields import IsoDateTimeField

from .bounds import BIGINT_MAX, timestamp_problem


class IntegerFilter(django_filters.NumberFilter):
    """A whole number between ``min_value`` and ``max_value`` (default: an id, 1 .. bigint max).

    Name the column's bounds where it is smaller than a bigint (a GPU index is a smallint)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, min_value: int = 1, max_value: int = BIGINT_MAX, **kwargs: Any) -> None:
        self.max_value = max_value
        super().__init__(*args, min_value=min_value, **kwargs)

    def get_max_validator(self) -> MaxValueValidator:
        return MaxValueValidator(self.max_value)


class BoundedIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time the database can compare: an offset of at most ±15:59, a year in UTC."""

    def to_python(self, value: Any) -> datetime | None:
        parsed: datetime | None = super().to_python(value)  # django-filter has no type information
        if parsed is not None:
            problem = timestamp_problem(parsed)
            if problem is not None:
                raise forms.ValidationError(problem, code="invalid")
        return parsed


class IsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = BoundedIsoDateTimeField


def _column_range(field: models.Field[Any, Any]) -> dict[str, int]:
    low, high = connection.ops.integer_field_range(field.get_internal_type())
    return {"min_value": 0 if low is None else low, "max_value": BIGINT_MAX if high is None else high}


_INTEGER_COLUMNS = (
    models.AutoField,
    models.BigAutoField,
    models.SmallAutoField,
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
)


class FilterSet(django_filters.FilterSet):
    """django-filter's FilterSet whose generated filters (``Meta.fields``) are bounded too."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        **{column: {"filter_class": IntegerFilter, "extra": _column_range} for column in _INTEGER_COLUMNS},
        models.DateTimeField: {"filter_class": IsoDateTimeFilter},
    }


class RestFilterSet(django_filters.rest_framework.FilterSet, FilterSet):
    """What the API's filter backend generates for ``filterset_fields``: DRF's boolean parsing,
    the bounded filters of ``FilterSet``."""

    FILTER_DEFAULTS = {
        **django_filters.rest_framework.FilterSet.FILTER_DEFAULTS,
        **{column: FilterSet.FILTER_DEFAULTS[column] for column in (*_INTEGER_COLUMNS, models.DateTimeField)},
    }


class FilterBackend(django_filters.rest_framework.DjangoFilterBackend):
    """DjangoFilterBackend generating its FilterSets from ``RestFilterSet`` (bounded filters)."""

    filterset_base = RestFilterSet
