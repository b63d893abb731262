"""A real HTTP receiver on 127.0.0.1 (http.server in a thread) that verifies signatures and keeps
what it took; the feed's settle time at 0 so a test's own gaps in the ids pass at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from feeds.delivery import verify
from nodes.choices import NodeState
from tests.factories import ClusterFactory, NodeFactory

SECRET = "s3cret-of-the-receiver-0123456789"


class Receiver:
    """Answers each POST with the next status of ``statuses`` (then 204); keeps the CloudEvents of
    the batches it accepted, whether each signature verified, and every attempt's status."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.accepted: list[dict[str, Any]] = []
        self.attempts: list[int] = []
        self.signatures_ok: list[bool] = []
        self.content_types: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.signatures_ok.append(verify(SECRET, body, self.headers.get("Nodewarden-Signature", "")))
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                receiver.attempts.append(status)
                if status < 300:
                    receiver.accepted.extend(json.loads(body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def ids(self) -> list[str]:
        return [e["id"] for e in self.accepted]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(autouse=True)
def _settle_at_once(settings):
    settings.NODEWARDEN_FEED_SETTLE_SECONDS = 0


@pytest.fixture
def production_node(tenant):
    return NodeFactory(
        hostname="gpu-feed-001", tenant=tenant, cluster=ClusterFactory(name="c-east"), state=NodeState.PRODUCTION
    )
