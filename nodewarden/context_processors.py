"""Template context every portal page gets."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest


def portal(request: HttpRequest) -> dict[str, Any]:
    """``api_docs``: whether the Swagger UI is served (NODEWARDEN_API_DOCS), for the menu's link;
    ``live_refresh_seconds``: how often live regions refresh (NODEWARDEN_LIVE_REFRESH_SECONDS)."""
    return {
        "api_docs": settings.NODEWARDEN_API_DOCS != "off",
        "live_refresh_seconds": settings.NODEWARDEN_LIVE_REFRESH_SECONDS,
    }
