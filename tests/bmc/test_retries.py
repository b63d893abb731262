"""bmc.client's retry policy: bounded, exponential, only for failures that may pass.

The retry counts are measured where the requests arrive: a listener that counts
connections, and an HTTP server that counts requests.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bmc import client
from bmc.drivers.base import BmcError, BmcUnreachable
from bmc.models import BmcEndpoint
from sandbox.emulators.bmc import free_port

from .conftest import BmcEndpointFactory

pytestmark = pytest.mark.django_db


@contextmanager
def hanging_up_listener() -> Iterator[tuple[str, list[int]]]:
    """Accepts every TCP connection and closes it at once; yields (url, [connections])."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.01)  # close() does not wake a blocked accept(): poll a stop flag instead
    connections = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            connections[0] += 1
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", connections
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()


@contextmanager
def answering_server(status: int) -> Iterator[tuple[str, list[int]]]:
    """Answers every GET with ``status`` and a Redfish error body; yields (url, [requests])."""
    requests_seen = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's spelling
            requests_seen[0] += 1
            body = b'{"error": {"code": "Base.1.0.GeneralError", "message": "busy"}}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests_seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_connection_is_unreachable_after_bounded_retries(db, settings):
    endpoint = BmcEndpointFactory(address=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BmcUnreachable) as caught:
        client.read_inventory(endpoint)
    assert caught.value.attempts == settings.NODEWARDEN_BMC_RETRIES + 1
    assert "cannot connect ([Errno 111] Connection refused)" in str(caught.value)
    stored = BmcEndpoint.objects.get(pk=endpoint.pk)
    assert stored.last_error == str(caught.value) and stored.last_contact_at is None


def test_each_try_is_one_connection_and_the_tries_stop_at_the_limit(db, settings):
    settings.NODEWARDEN_BMC_RETRIES = 3
    with hanging_up_listener() as (url, connections), pytest.raises(BmcUnreachable):
        client.read_inventory(BmcEndpointFactory(address=url))
    assert connections[0] == 4  # the first try and three retries: sushy's own retries are off


def test_server_errors_are_retried(db, settings):
    with answering_server(503) as (url, requests_seen), pytest.raises(BmcError) as caught:
        client.firmware_inventory(BmcEndpointFactory(address=url))
    assert requests_seen[0] == settings.NODEWARDEN_BMC_RETRIES + 1
    assert "HTTP 503" in str(caught.value) and "busy" in str(caught.value)


def test_client_errors_are_not_retried(db):
    with answering_server(404) as (url, requests_seen), pytest.raises(BmcError) as caught:
        client.read_inventory(BmcEndpointFactory(address=url))
    assert requests_seen[0] == 1 and caught.value.attempts == 1


def test_the_waits_between_tries_double(db, settings, caplog):
    settings.NODEWARDEN_BMC_RETRY_BACKOFF_MS = 20
    endpoint = BmcEndpointFactory(address=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BmcUnreachable):
        client.read_inventory(endpoint)
    messages = [record.getMessage() for record in caplog.records]
    waits = [message.split("again in ")[1].split(" s")[0] for message in messages if "again in" in message]
    assert waits == ["0.02", "0.04"]


def test_a_bare_host_means_https(db):
    driver = client.driver_for(BmcEndpoint(address="10.0.0.5", username="admin", password="x"))
    assert driver.where == "Redfish BMC https://10.0.0.5"
