"""Portal views of the checks app."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from nodes.scoping import visible_node_or_404


def node_checks(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Active checks" partial (loaded with htmx)."""
    node = visible_node_or_404(request.user, pk)
    return render(request, "checks/_node_checks.html", {"node": node})
