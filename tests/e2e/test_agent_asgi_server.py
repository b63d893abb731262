"""The real node agent against the ingest process group's real server: granian (its RSGI interface,
as bin/serve ingest runs it, and its ASGI one) and uvicorn (httptools, uvloop) serving
nodewarden.asgi_ingest, as a deployment runs them (docs/production.md).

The server is another process on this test's PostgreSQL database (and its Redis): it sees only
what is committed, as production does, so an answer it gives is an answer after a commit.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from health.models import Finding
from nodewarden_agent.client import PortalClient
from telemetry.models import GpuSample, NodeReport, XidRecord
from telemetry.testing import make_report

from .conftest import XID_79_LINE, XID_GPU, Portal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
APP = "nodewarden.asgi_ingest:application"


def server_command(server: str, port: int) -> list[str]:
    """The command docs/production.md gives for the ingest group, on a port of the test's."""
    bin_dir = Path(sys.executable).parent
    if server == "uvicorn":
        return [
            *(str(bin_dir / "uvicorn"), APP, "--port", str(port), "--loop", "uvloop", "--http", "httptools"),
            *("--no-proxy-headers", "--no-access-log", "--log-level", "warning"),
        ]
    interface = "rsgi" if server == "granian" else "asgi"  # granian: as bin/serve ingest runs it
    return [
        *(str(bin_dir / "granian"), "--interface", interface, "--port", str(port), "--loop", "uvloop"),
        *("--no-ws", "--log-level", "warning", APP),
    ]


@pytest.fixture(params=["uvicorn", "granian", "granian-asgi"])
def ingest_server(request: pytest.FixtureRequest, db: None) -> Iterator[str]:
    """The ingest server on this test's database; its URL."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: the server is another process on the test database")
    db_settings = connection.settings_dict
    url = "postgresql://{USER}:{PASSWORD}@{HOST}:{PORT}/{NAME}".format(**db_settings)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "sandbox.settings", "DEBUG": "0"}
    proc = subprocess.Popen(server_command(request.param, port), env=env, cwd=ROOT)
    try:
        for _ in range(400):
            if proc.poll() is not None:
                raise RuntimeError(f"{request.param} exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()  # lifespan shutdown closes the writer's connection before the database goes
        proc.wait(30)


def test_the_agent_reports_to_the_ingest_server_unchanged(ingest_server, node, agent_token, hardware):
    agent = hardware.agent(ingest_server, agent_token)
    agent.cycle()
    agent.cycle()
    assert len(agent.spool) == 0, "the server accepted both reports"
    assert [r.seq for r in NodeReport.objects.filter(node=node).order_by("collected_at")] == [1, 2]
    assert GpuSample.objects.filter(node=node).count() == 16

    hardware.kernel_log(XID_79_LINE)
    hardware.lose_gpu(XID_GPU)
    agent.cycle()
    # The answer came after the commit: the finding is there the moment the agent has it.
    assert len(agent.spool) == 0
    assert XidRecord.objects.filter(node=node, xid=79).count() == 1
    assert Finding.objects.get(node=node, rule="xid").gpu_index == XID_GPU

    client = PortalClient(ingest_server, agent_token)
    report = make_report(node.hostname, collected_at=timezone.now() - timedelta(hours=1), gpus=8)
    assert client.post_reports([report]) == {"accepted": 1, "duplicates": 0}
    assert client.post_reports([report]) == {"accepted": 0, "duplicates": 1}  # a resend
    assert client.agent_state()["state"] == node.state  # the agent's other requests: Django's ASGI handler


def test_an_oversized_body_is_refused_without_being_read(ingest_server, node, agent_token):
    # A declared length over TELEMETRY_MAX_BODY_BYTES (8 MiB) is refused from its header; a chunked
    # body is read only until it passes the limit. Either way a 413, and the server stays up.
    host, port = ingest_server.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {agent_token}", "Content-Type": "application/json"}
    for chunked in (False, True):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        chunk = b" " * (1024 * 1024)
        try:
            if chunked:
                conn.request(
                    "POST", "/api/agent/reports/", body=iter([chunk] * 9), headers=headers, encode_chunked=True
                )
            else:
                conn.request("POST", "/api/agent/reports/", body=chunk * 9, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # granian answers before the rest is sent, and closes: the answer is still there to read
        response = conn.getresponse()
        assert response.status == 413, (chunked, response.read()[:200])
        conn.close()
    client = PortalClient(ingest_server, agent_token)
    report = make_report(node.hostname, collected_at=timezone.now() - timedelta(minutes=5), gpus=8)
    assert client.post_reports([report]) == {"accepted": 1, "duplicates": 0}


def test_the_portal_s_other_paths_answer_through_the_ingest_server(ingest_server, node, operator):
    # Not the report path: Django's own handler answers, over RSGI through a bridge. A query
    # string, a streamed answer (CSV export) and a refusal come back as the portal gives them.
    portal = Portal(ingest_server, operator)
    status, nodes = portal.get(f"/api/nodes/?hostname={node.hostname}")
    assert status == 200 and [n["hostname"] for n in nodes["results"]] == [node.hostname]
    export = urllib.request.Request(  # noqa: S310 - the test server's http:// URL
        f"{ingest_server}/api/repairs/export.csv?search=no-such-ticket",
        headers={"Authorization": f"Token {portal.token}", "Accept": "text/csv"},
    )
    with urllib.request.urlopen(export, timeout=10) as response:  # noqa: S310 - the Request above
        assert response.status == 200 and response.headers.get_content_type() == "text/csv"
        lines = response.read().decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("id,"), lines[:3]  # the header row, streamed; no ticket matches
    status, refusal = portal.request("POST", f"/api/nodes/{node.pk}/maintenance/start/", {"reason": ""})
    assert status == 400 and "reason" in json.dumps(refusal), refusal  # the body reached the view
