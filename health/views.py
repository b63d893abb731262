"""Portal views of the health app."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.scoping import visible_node_or_404


def node_alerts(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Alerts" partial (loaded with htmx)."""
    node = visible_node_or_404(request.user, pk)
    return render(request, "health/_node_alerts.html", {"node": node})
