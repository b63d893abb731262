"""The agent report endpoint's lean WSGI road (telemetry.api.wsgi): gunicorn's application sends
POST /api/agent/reports/ straight to the view and answers as the full Django stack does."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core import signals
from django.db import close_old_connections

from nodewarden.wsgi import application
from telemetry.api.wsgi import AgentReportsFastPath
from telemetry.models import NodeReport
from telemetry.testing import make_batch

from .conftest import T0, AgentClient

pytestmark = pytest.mark.django_db


def call(method: str, body: bytes = b"", **headers: str) -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": AgentClient.url,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        **headers,
    }
    answer: list[Any] = []
    # As Django's test client does: the request signals would close the connection, and with it
    # the test's transaction (in production they close or reuse it between requests).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        chunks = application(environ, lambda status, items, *_: answer.extend([status, dict(items)]))
        try:
            content = b"".join(chunks)
        finally:
            chunks.close()  # type: ignore[attr-defined]
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return answer[0], answer[1], content


def test_the_deployed_application_takes_the_lean_road():
    assert isinstance(application, AgentReportsFastPath)


def test_it_stores_a_report_and_answers_as_the_full_stack_does(node, token):
    body = json.dumps(make_batch(node.hostname, start=T0)).encode()
    status, headers, content = call("POST", body, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (status, json.loads(content)) == ("200 OK", {"accepted": 1, "duplicates": 0})
    assert headers["Content-Type"] == "application/json"
    assert NodeReport.objects.filter(node=node).count() == 1
    again = AgentClient(token).post(make_batch(node.hostname, start=T0))  # the full stack, same report
    assert again.json() == {"accepted": 0, "duplicates": 1}


def test_it_refuses_a_missing_token_with_401_and_the_scheme(node):
    status, headers, content = call("POST", b'{"reports": []}')
    assert status == "401 Unauthorized" and headers["WWW-Authenticate"] == "Bearer"
    assert json.loads(content)["error"] == "unauthorized"


def test_any_other_method_goes_through_django():
    status, _, content = call("GET")
    assert status == "405 Method Not Allowed" and json.loads(content)["error"] == "method not allowed"
