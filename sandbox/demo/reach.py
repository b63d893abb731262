"""Where the demo's alerts and lifecycle events go: a real Alertmanager and a feed receiver.

bin/demo runs ``manage.py demo_reach``, which calls ``running_demo_reach``:

- **Alertmanager is real** (Debian's ``prometheus-alertmanager``, or ``alertmanager`` on the PATH)
  when it is installed: on 127.0.0.1 and a free port, clustering off, its data under the demo's
  var dir, routing every alert to a receiver that notifies nobody (open its UI to see them). The
  portal and workers push to it through ``NODEWARDEN_ALERTMANAGER_URL`` (``DemoReach.env_exports``).
  Without the binary the demo runs without it and says so.
- **The feed receiver** (``FeedReceiver``) is a small HTTP server standing in for a customer's
  webhook endpoint: it checks each batch's ``Nodewarden-Signature`` against the demo
  subscription's secret (401 when it does not verify), keeps the last CloudEvents it accepted and
  lists them as JSON on ``GET /``. The demo seed creates the subscription (inactive); starting the
  receiver points it here and activates it, from the newest event on (the receiver keeps nothing
  across restarts, and months of seeded history would bury the live events).
"""

from __future__ import annotations

import collections
import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from feeds.delivery import SIGNATURE_HEADER, verify

KEEP = 500  # CloudEvents the receiver keeps (newest); older ones are dropped
RECEIVER_DESCRIPTION = "Demo feed receiver (bin/demo)"
# Where the seeded subscription points until the receiver runs (port 9, discard: nothing answers).
RECEIVER_PLACEHOLDER = "http://127.0.0.1:9/hook"
ALERTMANAGER_CONFIG = 'route: {receiver: "nobody"}\nreceivers:\n  - name: "nobody"\n'


class FeedReceiver:
    """A webhook endpoint for signed CloudEvent batches (``POST /hook``), listing what it took on ``GET /``.

    A batch whose signature does not verify with ``secret`` (or is older than the tolerance) is
    answered 401 and counted in ``rejected``, never kept: a receiver must not act on events anyone
    could have posted."""

    def __init__(self, secret: str, *, port: int = 0, keep: int = KEEP) -> None:
        self.secret = secret
        self.received: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self.rejected = 0
        self.total = 0  # every CloudEvent accepted since start; ``received`` keeps only the newest
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.hook_url = f"{self.url}/hook"
        self._thread: threading.Thread | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path != "/hook":
                    self._answer(404, {"detail": "POST CloudEvent batches to /hook"})
                    return
                try:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                except ValueError:
                    self._answer(400, {"detail": "Content-Length is required"})
                    return
                if not verify(receiver.secret, body, self.headers.get(SIGNATURE_HEADER, "")):
                    with receiver._lock:
                        receiver.rejected += 1
                    self._answer(401, {"detail": "the signature does not verify"})
                    return
                try:
                    batch = json.loads(body)
                except ValueError:
                    self._answer(400, {"detail": "the body is not JSON"})
                    return
                if not isinstance(batch, list):
                    self._answer(400, {"detail": "a batch is a JSON array of CloudEvents"})
                    return
                at = datetime.now(UTC).isoformat()
                with receiver._lock:
                    receiver.received.extend({"received_at": at, "cloudevent": ce} for ce in batch)
                    receiver.total += len(batch)
                self._answer(204, None)

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                if url.path in ("/", "/events"):
                    limit = urllib.parse.parse_qs(url.query).get("limit", [""])[0]
                    if limit and not (limit.isdigit() and int(limit) > 0):
                        self._answer(400, {"detail": "limit is a positive whole number"})
                        return
                    self._answer(200, receiver.listing(int(limit) if limit else None))
                else:
                    self._answer(404, {"detail": "GET / lists the CloudEvents received"})

            def _answer(self, status: int, payload: Any) -> None:
                body = b"" if payload is None else json.dumps(payload, indent=1).encode()
                self.send_response(status)
                if body:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def listing(self, limit: int | None = None) -> dict[str, Any]:
        """What ``GET /`` answers: how many CloudEvents arrived since start, the newest ones kept
        (newest first, at most ``keep``) and the batches refused. ``?limit=N`` shortens the list."""
        with self._lock:
            kept = list(self.received)
            rejected, total = self.rejected, self.total
        return {"received": total, "kept": len(kept), "rejected_batches": rejected, "events": kept[::-1][:limit]}

    def cloudevents(self) -> list[dict[str, Any]]:
        """The CloudEvents kept, oldest first."""
        with self._lock:
            return [r["cloudevent"] for r in self.received]

    def start(self) -> FeedReceiver:
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="feed-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alertmanager_binary() -> str | None:
    """Debian's prometheus-alertmanager, or upstream's alertmanager; None when neither is on the PATH."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DemoAlertmanager:
    """One Alertmanager process on 127.0.0.1 with its config and data under ``folder``; stopped by its PID."""

    def __init__(self, binary: str, folder: Path) -> None:
        self.binary, self.folder = binary, folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30) -> DemoAlertmanager:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "alertmanager.yml"
        config.write_text(ALERTMANAGER_CONFIG)
        log = (self.folder / "alertmanager.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # one instance: no gossip port
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1):  # noqa: S310 - our own http:// URL
                    return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Alertmanager did not start; see {self.folder / 'alertmanager.log'}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def demo_subscription() -> Any:
    """The subscription the demo seed made for the receiver; None in a demo database older than it."""
    from feeds.models import Subscription

    return Subscription.objects.filter(description=RECEIVER_DESCRIPTION).order_by("pk").first()


def point_demo_subscription(subscription: Any, url: str) -> None:
    """Point the demo subscription at ``url`` and activate it, from the newest event on."""
    from django.utils import timezone

    from feeds.models import Subscription
    from nodes.models import NodeEvent

    newest = NodeEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    # Delivery state is feeds.delivery's, but a receiver that just started holds nothing: starting
    # it from the newest event with no failures owed is a fresh subscription, as subscribe() makes.
    Subscription.objects.filter(pk=subscription.pk).update(
        url=url,
        active=True,
        cursor=newest,
        failures=0,
        lease_until=None,
        last_error="",
        next_attempt_at=timezone.now(),
    )


@dataclass
class DemoReach:
    """What ``running_demo_reach`` started: the Alertmanager (None without the binary) and the receiver."""

    receiver: FeedReceiver
    alertmanager: DemoAlertmanager | None = None
    notes: list[str] = field(default_factory=list)

    def env_exports(self) -> str:
        """Shell export lines for the portal and workers (bin/demo sources them)."""
        if self.alertmanager is None:
            return "# no Alertmanager: alerts are not pushed\n"
        return f"export NODEWARDEN_ALERTMANAGER_URL={self.alertmanager.url}\n"

    def problem(self) -> str:
        if self.alertmanager is not None and not self.alertmanager.alive():
            return f"Alertmanager exited; see {self.alertmanager.folder / 'alertmanager.log'}"
        return ""

    def describe(self) -> str:
        lines = [f"Feed receiver: {self.receiver.url}/ (CloudEvents it received, signatures checked)"]
        if self.alertmanager is not None:
            lines.append(f"Alertmanager: {self.alertmanager.url}/ (the demo's alerts, pushed by Nodewarden)")
        return "\n".join(lines + self.notes)


@contextlib.contextmanager
def running_demo_reach(var_dir: Path, *, receiver_port: int = 0) -> Iterator[DemoReach]:
    """Start the receiver (pointing the demo subscription at it) and, when installed, Alertmanager."""
    subscription = demo_subscription()
    receiver = FeedReceiver(subscription.secret if subscription else "", port=receiver_port).start()
    reach = DemoReach(receiver=receiver)
    try:
        if subscription is None:
            reach.notes.append("No demo subscription (seeded before it existed): the receiver gets nothing.")
        else:
            point_demo_subscription(subscription, receiver.hook_url)
        binary = alertmanager_binary()
        if binary is None:
            reach.notes.append(
                "Alertmanager is not installed (apt-get install prometheus-alertmanager): alerts are not pushed."
            )
        else:
            reach.alertmanager = DemoAlertmanager(binary, var_dir / "alertmanager").start()
        yield reach
    finally:
        if reach.alertmanager is not None:
            reach.alertmanager.stop()
        from feeds.models import Subscription

        # Nothing listens any more: a paused subscription, not a pile of dead letters.
        if subscription is not None:
            Subscription.objects.filter(pk=subscription.pk).update(active=False)
        receiver.stop()
