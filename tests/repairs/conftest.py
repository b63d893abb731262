"""Fixtures for repairs: nodes in a state, operators as actors, inline Celery, and a real
HTTP server on 127.0.0.1 that plays the external ticketing system."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rest_framework.test import APIClient

from nodes.choices import NodeState
from nodes.services import Actor
from nodewarden.celery import app as celery_app
from repairs import services
from tests.factories import NodeFactory, RackFactory
from tests.oncommit import committed


@pytest.fixture
def eager(django_capture_on_commit_callbacks) -> Iterator[Callable[[], Any]]:
    """Tasks run inline, and on-commit callbacks run when the block ends: ``with eager(): ...``."""
    celery_app.conf.task_always_eager = True
    try:
        yield committed(django_capture_on_commit_callbacks)
    finally:
        celery_app.conf.task_always_eager = False


@pytest.fixture
def node_in(db) -> Callable[..., Any]:
    """A node put straight into a state (as the factories do), racked at U12 of its site's rack."""

    def make(state: str = NodeState.TRIAGE, **kwargs: Any) -> Any:
        node = NodeFactory(state=state, rack_unit=12, **kwargs)
        node.rack = RackFactory(site=node.site, name=f"r{node.pk:03d}")
        node.save(update_fields=["rack"])
        return node

    return make


@pytest.fixture
def as_operator(operator) -> Actor:
    return Actor(user=operator)


@pytest.fixture
def ticket_on(as_operator) -> Callable[..., Any]:
    """Open a ticket through the service (the only road), optionally walked on to a state."""

    def make(node: Any, component: str = "GPU 3 (serial 1650123)", *, started: bool = False, **kwargs: Any) -> Any:
        ticket = services.open_repair_ticket(
            node.pk,
            component=component,
            what="Reseat, then replace if it fails",
            actor=as_operator,
            reason="XID 79: fell off the bus",
            **kwargs,
        )
        if started:
            ticket = services.start_repair(ticket.pk, actor=as_operator, reason="on site", assignee="dc-tech-7")
        return ticket

    return make


@pytest.fixture
def case_on(as_operator) -> Callable[..., Any]:
    """Open an RMA case through the service, optionally walked on to shipped / returned."""

    def make(node: Any, *, to: str = "opened", **kwargs: Any) -> Any:
        case = services.open_rma_case(
            node.pk,
            vendor="NVIDIA",
            part="H100 80GB SXM5",
            failed_serial="1650123",
            actor=as_operator,
            reason="GPU fails dcgm diag level 3",
            **kwargs,
        )
        if to in ("shipped", "returned"):
            case = services.ship_rma(case.pk, actor=as_operator, reason="courier picked up", vendor_case_number="C-42")
        if to == "returned":
            case = services.receive_rma(
                case.pk, replacement_serial="1650999", outcome="replaced", actor=as_operator, reason="new GPU arrived"
            )
        return case

    return make


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


class HookServer(ThreadingHTTPServer):
    """Answers each POST with the next status in ``answers`` (200 when none are left) and keeps what it got."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HookHandler)
        self.answers: list[int] = []
        self.received: list[tuple[dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/nodewarden"

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]


class _HookHandler(BaseHTTPRequestHandler):
    server: HookServer

    def do_POST(self) -> None:  # http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.append((dict(self.headers), body))
        status = self.server.answers.pop(0) if self.server.answers else 200
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"ok" if status < 300 else b"upstream exploded")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/nodewarden"
