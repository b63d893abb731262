"""The fleet auditor's page (staff only; anyone else is answered 404): the last run's counts per
invariant and its breaches with their evidence, and the recent runs."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.scoping import staff_only

from .choices import INVARIANT_COLOURS, Invariant
from .models import AuditRun

RECENT_RUNS = 24


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """The last finished run: per invariant checked / breaches / unknown; each breach; recent runs."""
    # Only the columns the table shows: a run's breaches list may be large.
    recent = list(AuditRun.objects.defer("breaches", "params", "cursors")[:RECENT_RUNS])
    run = AuditRun.objects.filter(finished__isnull=False).first()
    rows = [{"invariant": inv, "label": inv.label, "colour": INVARIANT_COLOURS[inv],
             **(run.counts.get(inv.value, {}) if run else {})} for inv in Invariant]
    return render(request, "audit/overview.html", {
        "run": run, "rows": rows, "breaches": run.breaches if run else [], "recent": recent,
        "labels": dict(Invariant.choices), "colours": INVARIANT_COLOURS,
    })
