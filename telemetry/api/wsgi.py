"""The agent report endpoint's lean road through WSGI: POST /api/agent/reports/ skips Django's
middleware and URL resolution.

At fleet scale that endpoint is most of the portal's requests (one per node every 30 s), and the
middleware stack (sessions, CSRF, messages, CSP, clickjacking, htmx, axes, whitenoise) costs
about as much Python per request as the view itself while giving a bearer-token JSON endpoint
nothing: no cookie, no session, no page. What the view needs it does itself (the token, the
body limit, the decoding). What the stack would still owe every request is kept here: the
request_started/request_finished signals (database connections are closed or reused by them)
and turning an unexpected exception into Django's 500 response.

Any other path or method goes to Django's full handler unchanged. Tests post through Django's
test client, which always takes the full stack; tests/telemetry/test_group_commit.py checks
that both roads answer alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

from django.core import signals
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

StartResponse = Callable[..., Any]


class AgentReportsFastPath:
    """WSGI middleware: the agent report POSTs to the view directly, everything else to ``app``."""

    def __init__(self, app: WSGIHandler) -> None:
        from .views import agent_reports

        self.app = app
        self.path = reverse("api:agent-reports")
        # A sync view: the wrapper returns the response itself, never an awaitable.
        self.view = cast(Callable[[HttpRequest], HttpResponse], convert_exception_to_response(agent_reports))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != self.path or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        signals.request_started.send(sender=self.__class__, environ=environ)
        request = WSGIRequest(environ)
        response = self.view(request)
        response._resource_closers.append(request.close)  # type: ignore[attr-defined]  # as WSGIHandler does
        start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
        return response  # its close() sends request_finished, as Django's own handler's does
