"""Template helpers that read labels and colours from nodes.choices (one source of truth)."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from nodes.choices import EVENT_KIND_COLOURS, GPU_HEALTH_COLOURS, STATE_COLOURS, EventKind, GpuHealth, NodeState

register = template.Library()


@register.simple_tag
def state_badge(state: str) -> str:
    if not state:
        return ""
    label = NodeState(state).label if state in NodeState.values else state
    return format_html(
        '<span class="badge" data-state="{}" data-colour="{}">{}</span>', state, STATE_COLOURS.get(state, "#888"), label
    )


@register.simple_tag
def event_kind_badge(kind: str) -> str:
    label = EventKind(kind).label if kind in EventKind.values else kind
    return format_html(
        '<span class="badge badge-outline" data-colour="{}">{}</span>', EVENT_KIND_COLOURS.get(kind, "#888"), label
    )


@register.simple_tag
def gpu_health_badge(health: str) -> str:
    """A GPU's own health (healthy, suspect, fenced) as a badge, coloured from nodes.choices."""
    label = GpuHealth(health).label if health in GpuHealth.values else health
    return format_html(
        '<span class="badge" data-gpu-health="{}" data-colour="{}">{}</span>',
        health,
        GPU_HEALTH_COLOURS.get(health, "#888"),
        label,
    )


@register.simple_tag(takes_context=True)
def sort_link(context: template.Context, field: str, label: str) -> str:
    """A column header that sorts by ``field``, flipping direction, keeping the other filters."""
    request = context["request"]
    query = request.GET.copy()
    current = query.get("ordering", "")
    new = f"-{field}" if current == field else field
    query["ordering"] = new
    query.pop("page", None)
    arrow = " ▲" if current == field else " ▼" if current == f"-{field}" else ""
    return format_html('<a href="?{}">{}{}</a>', query.urlencode(), label, arrow)
