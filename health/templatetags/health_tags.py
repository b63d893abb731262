"""Severity badges: colours from health.choices, the one place they live."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from health.choices import SEVERITY_COLOURS, Severity

register = template.Library()


@register.simple_tag
def severity_badge(severity: str) -> str:
    try:
        value = Severity(severity)
    except ValueError:
        return format_html('<span class="badge">{}</span>', severity)
    return format_html('<span class="badge" data-colour="{}">{}</span>', SEVERITY_COLOURS[value], value.label)
