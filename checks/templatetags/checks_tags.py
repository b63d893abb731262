"""How a run's figures read, from checks.specs (the run record itself lives in nodes, below checks)."""

from __future__ import annotations

from django import template

from nodes.models import Run

from ..specs import describe_figures

register = template.Library()


@register.filter
def figures_text(run: Run | None) -> str:
    """A short human reading of the run's figures, e.g. "busbw 362 GB/s"; "" for no run (a stage not
    started yet), as the template's variable lookup would give."""
    return describe_figures(run.kind, run.figures) if run is not None else ""
