"""Live regions: the parts of a page that refresh themselves (static/js/live.js, htmx).

A live region is an element with an id, ``data-live`` and ``hx-get`` pointing back at its own
page; live.js fires ``nw-live`` on it every few seconds (not while the tab is hidden, the user
paused it, rows are selected or a form field is focused), htmx fetches the URL with the region's
id in the ``HX-Target`` header, and the view answers with only that region's template
(:func:`template_for`), so a refresh renders a fragment, never the whole page.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.http import HttpRequest


def wanted_fragment(request: HttpRequest, fragments: Mapping[str, str]) -> str | None:
    """The template of the live region this htmx request asks for, or None when it asks for the page."""
    htmx = getattr(request, "htmx", None)
    if not htmx:
        return None
    return fragments.get(htmx.target or "")


def template_for(request: HttpRequest, page: str, fragments: Mapping[str, str]) -> str:
    """``page``'s template, or the template of the region (by element id) an htmx refresh asks for."""
    return wanted_fragment(request, fragments) or page
