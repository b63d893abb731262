"""What a report is about: a period (the last 7, 30 or 90 days, or ``since``/``until``), and
optionally one cluster and one tenant. One form for the pages and the CSV files; the API reads
the same fields through ``api.serializers.ReportQuerySerializer``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.utils import timezone

from fleet.models import Cluster, Tenant

from .choices import DEFAULT_DAYS, PERIOD_DAYS

MAX_SPAN = timedelta(days=400)


@dataclass(frozen=True)
class Period:
    """[since, until): the instants a report covers."""

    since: datetime
    until: datetime
    days: int | None = None  # the preset chosen, if one was

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()

    def query(self, **extra: Any) -> str:
        """The period as URL parameters (exact instants: a list linked from a chart counts the same rows)."""
        params = {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            **{k: v for k, v in extra.items() if v not in (None, "")},
        }
        return urlencode(params)


def period_of(since: datetime | None, until: datetime | None, days: int | None, now: datetime | None = None) -> Period:
    """The ``days`` before ``until`` (default: now) when a preset is chosen, else ``since`` to
    ``until``, else the last 30 days."""
    until = until or now or timezone.now()
    if days is None and since is not None:
        return Period(since, until)
    days = days or DEFAULT_DAYS
    return Period(until - timedelta(days=days), until, days)


def check_period(since: datetime | None, until: datetime | None) -> str | None:
    """Why a period is refused, or None."""
    if since is not None and until is not None and since >= until:
        return "since must be before until."
    if since is not None and (until or timezone.now()) - since > MAX_SPAN:
        return f"A report covers at most {MAX_SPAN.days} days."
    return None


class ReportForm(forms.Form):
    """The fleet report's and the availability report's parameters; every field may be empty."""

    days = forms.TypedChoiceField(
        choices=[(d, f"Last {d} days") for d in PERIOD_DAYS], coerce=int, required=False, empty_value=None
    )
    since = forms.DateTimeField(required=False)
    until = forms.DateTimeField(required=False)
    cluster = forms.ModelChoiceField(Cluster.objects.order_by("name"), to_field_name="name", required=False)
    tenant = forms.ModelChoiceField(Tenant.objects.order_by("name"), to_field_name="slug", required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        problem = check_period(data.get("since"), data.get("until"))
        if problem:
            raise forms.ValidationError(problem)
        return data

    def period(self) -> Period:
        data = self.cleaned_data
        return period_of(data.get("since"), data.get("until"), data.get("days"))
