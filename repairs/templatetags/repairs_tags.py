"""State badges of tickets and RMA cases: labels and colours from repairs.choices."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from repairs.choices import STATE_COLOURS, STATE_LABELS

register = template.Library()


@register.simple_tag
def repair_state_badge(state: str) -> str:
    if not state:
        return ""
    return format_html(
        '<span class="badge" data-state="{}" data-colour="{}">{}</span>',
        state,
        STATE_COLOURS.get(state, "#888"),
        STATE_LABELS.get(state, state),
    )
