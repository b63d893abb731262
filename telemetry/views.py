"""Portal views of the telemetry app."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.scoping import visible_node_or_404


def node_gpu_health(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "GPU health" partial (loaded with htmx)."""
    node = visible_node_or_404(request.user, pk)
    return render(request, "telemetry/_node_gpu_health.html", {"node": node})
