"""The fleet auditor's page (staff only; anyone else is answered 404): the last run's counts per
invariant and its breaches with their evidence, and the recent runs."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.scoping import staff_only
from nodewarden.beat import next_run

from .choices import INVARIANT_COLOURS, Invariant
from .models import AuditRun

RECENT_RUNS = 24


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """The last finished run: per invariant checked / breaches / unknown; each breach; recent runs."""
    # Only the columns the table shows: a run's breaches list may be large.
    recent = list(AuditRun.objects.defer("breaches", "params", "cursors")[:RECENT_RUNS])
    run = AuditRun.objects.filter(finished__isnull=False).first()
    rows = [
        {
            "invariant": inv,
            "label": inv.label,
            "colour": INVARIANT_COLOURS[inv],
            **(run.counts.get(inv.value, {}) if run else {}),
        }
        for inv in Invariant
    ]
    # Evidence as indented JSON an operator can read (and copy), not a Python dict's repr.
    breaches = [
        {**b, "evidence_json": json.dumps(b.get("evidence", {}), indent=1, sort_keys=True, default=str)}
        for b in (run.breaches if run else [])
    ]
    return render(
        request,
        "audit/overview.html",
        {
            "run": run,
            "next_run": next_run("audit.tasks.audit_fleet"),  # when the page fills (or refreshes)
            "rows": rows,
            "breaches": breaches,
            "recent": recent,
            "labels": dict(Invariant.choices),
            "colours": INVARIANT_COLOURS,
        },
    )
