"""Severity badges and recommended actions as the pages show them: labels and colours from
health.choices, the one place they live."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from health.choices import SEVERITY_COLOURS, RecommendedAction, Severity

register = template.Library()


@register.simple_tag
def severity_badge(severity: str) -> str:
    try:
        value = Severity(severity)
    except ValueError:
        return format_html('<span class="badge">{}</span>', severity)
    return format_html('<span class="badge" data-colour="{}">{}</span>', SEVERITY_COLOURS[value], value.label)


@register.simple_tag
def recommended(action: str) -> str:
    """The recommended action's label; "—" when nothing is recommended (a failed Day 1 stage, an
    external alert): the word "None" in that column read as a value someone chose."""
    if not action or action == RecommendedAction.NONE:
        return "—"
    try:
        return str(RecommendedAction(action).label)
    except ValueError:
        return action
