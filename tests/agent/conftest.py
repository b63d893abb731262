"""Fixtures for the node agent's tests: real captured formats, written to tmp_path.

The agent is its own package (agent/); its source folder goes first on sys.path so
these tests always exercise this checkout's agent, whatever the venv's editable
install points at.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

AGENT_SRC = Path(__file__).resolve().parents[2] / "agent" / "src"
if str(AGENT_SRC) not in sys.path:
    sys.path.insert(0, str(AGENT_SRC))
for name in [m for m in sys.modules if m == "nodewarden_agent" or m.startswith("nodewarden_agent.")]:
    del sys.modules[name]  # a copy imported from elsewhere must not shadow this checkout's

FIXTURES = Path(__file__).parent / "fixtures"
TOKEN = "nwa_test-token"


def write_ib_tree(root: Path, description: dict) -> Path:
    """Write a /sys/class/infiniband tree (files with the kernel's contents) under root."""
    for device, spec in description["devices"].items():
        for port, files in spec["ports"].items():
            port_dir = root / device / "ports" / port
            for folder in ("counters", "hw_counters"):
                (port_dir / folder).mkdir(parents=True, exist_ok=True)
                for counter, value in files.get(folder, {}).items():
                    (port_dir / folder / counter).write_text(f"{value}\n")
            for name, value in files.items():
                if name not in ("counters", "hw_counters"):
                    (port_dir / name).write_text(f"{value}\n")
    return root


@pytest.fixture
def ib_root(tmp_path):
    return write_ib_tree(tmp_path / "infiniband", json.loads((FIXTURES / "ib" / "h100-8x-ndr.json").read_text()))


@pytest.fixture
def proc_root(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    (root / "uptime").write_text("350735.47 5585596.12\n")
    (root / "loadavg").write_text("0.52 0.58 0.59 2/1633 3377447\n")
    (root / "meminfo").write_text(
        "MemTotal:       2113645836 kB\nMemFree:        1998765432 kB\n"
        "MemAvailable:   2056789012 kB\nBuffers:          123456 kB\n"
    )
    return root


@pytest.fixture
def edac_root(tmp_path):
    root = tmp_path / "edac" / "mc"
    for mc, (ce, ue) in enumerate([(3, 0), (0, 0), (1, 0), (0, 0)]):
        (root / f"mc{mc}").mkdir(parents=True)
        (root / f"mc{mc}" / "ce_count").write_text(f"{ce}\n")
        (root / f"mc{mc}" / "ue_count").write_text(f"{ue}\n")
    return root


class FakePortal:
    """A real HTTP server on 127.0.0.1 speaking the portal's agent API.

    The portal's own endpoints are built in parallel by others, so this stands in for
    them: same paths, statuses and bodies as the contract in the brief."""

    def __init__(self):
        self.mode = "ok"  # "ok", "down" (503), "auth" (401)
        self.retry_after: int | None = None  # the Retry-After of a 503
        self.reject_ids: set = set()
        self.received: list = []  # accepted reports, in arrival order
        self.requests: list = []  # (method, path, number of reports)
        self.checks: dict = {"idle": False, "checks": []}
        self.results: dict = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _handler(self):
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                if status == 503 and portal.retry_after is not None:
                    self.send_header("Retry-After", str(portal.retry_after))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _guard(self):
                if portal.mode == "down":
                    return self._reply(503, {"error": "unavailable"}) or True
                if portal.mode == "auth" or self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._reply(401, {"error": "invalid token"}) or True
                return False

            def do_GET(self):
                portal.requests.append(("GET", self.path, 0))
                if not self._guard():
                    self._reply(200, portal.checks)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                portal.requests.append(("POST", self.path, len(body.get("reports", []))))
                if self._guard():
                    return None
                if self.path.startswith("/api/agent/checks/"):
                    portal.results[int(self.path.split("/")[4])] = body
                    return self._reply(200, {"ok": True})
                bad = [r["report_id"] for r in body["reports"] if r["report_id"] in portal.reject_ids]
                if bad:
                    return self._reply(400, {"error": "invalid report", "detail": f"report {bad[0]} is malformed"})
                seen = {r["report_id"] for r in portal.received}
                fresh = [r for r in body["reports"] if r["report_id"] not in seen]
                portal.received.extend(fresh)
                self._reply(200, {"accepted": len(fresh), "duplicates": len(body["reports"]) - len(fresh)})
                return None

        return Handler

    def seqs(self):
        return [r["seq"] for r in self.received]


@pytest.fixture
def portal():
    server = FakePortal()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def refused_url():
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
