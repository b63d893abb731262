"""The agent report endpoint's ASGI road (telemetry.api.asgi, nodewarden.asgi_ingest): the same
answers as the WSGI road, one transaction for concurrent requests, an answer only after the commit,
503 + Retry-After when the queue is full. A real server serving the real node agent:
tests/e2e/test_agent_asgi_server.py.

The app is called in-process with ASGI messages (as uvicorn would call it) and commits for real
(``transaction=True``): its writer thread has its own connection and sees only committed rows.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection
from django.test import override_settings

from nodes.services import Actor
from telemetry import groupcommit
from telemetry.api.asgi import AgentReportsApp, _stored, _wire
from telemetry.api.views import VettedReports, answer_agent_reports
from telemetry.ingest import IngestResult
from telemetry.models import IngestRejection, NodeReport, XidRecord
from telemetry.services import issue_agent_token, revoke_agent_tokens
from telemetry.testing import make_batch, make_report
from tests.factories import NodeFactory

from .conftest import T0, AgentClient

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/agent/reports/"


@pytest.fixture
def app() -> Iterator[AgentReportsApp]:
    """An app of this test's own; its writer thread's connection closes before the database goes."""
    made = AgentReportsApp()
    yield made
    made._executor.submit(lambda: connection.close()).result()  # the thread's own connection
    made._executor.shutdown()


def scope(headers: dict[str, str], *, method: str = "POST", path: str = URL) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def call(app: AgentReportsApp, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI app; the body arrives in two chunks, as a server may pass it."""
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]
    messages = [{"type": "http.request", "body": c, "more_body": i == 0} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)  # no disconnect while the test waits for the answer
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    headers = {"Content-Length": str(len(body)), **headers}
    await app(scope(headers), receive, send)
    start, end = sent[0], sent[-1]
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, end["body"]


def run_async(coroutine: Any) -> Any:
    """``asyncio.run`` on a thread of its own. The calling thread may hold a running event loop that is
    not this test's: Playwright's sync API (the browser tests' session-scoped browser, in the same
    xdist worker) leaves its loop set as running, and asyncio.run refuses to start under it."""
    with ThreadPoolExecutor(1, thread_name_prefix="asgi-test") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def post(app: AgentReportsApp, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    return run_async(call(app, body, headers))


def post_all(app: AgentReportsApp, requests: list[tuple[bytes, dict[str, str]]]) -> list[Any]:
    async def together() -> list[Any]:
        return await asyncio.gather(*(call(app, body, headers) for body, headers in requests))

    return run_async(together())


def bearer(token: str | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}


def xid_batch(hostname: str, when: Any = T0) -> dict[str, Any]:
    report = make_report(hostname, collected_at=when, gpus=8)
    report["xid_events"] = [
        {
            "xid": 79,
            "observed_at": when.isoformat(),
            "raw": "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            "pci_bus_id": "0000:18:00",
            "message": "GPU has fallen off the bus.",
        }
    ]
    return {"reports": [report]}


# Each case: what the node's agent sends (given the node's hostname and token) and to which token.
CASES: dict[str, Any] = {
    "good": lambda h: (json.dumps(make_batch(h, start=T0, count=2)).encode(), {}),
    "gzipped": lambda h: (gzip.compress(json.dumps(make_batch(h, start=T0)).encode()), {"Content-Encoding": "gzip"}),
    "malformed": lambda h: (b'{"reports": [{"hostname": ', {}),
    "wrong type": lambda h: (json.dumps({"reports": [{"hostname": h, "seq": "one"}]}).encode(), {}),
    "bad gzip": lambda h: (b"not gzip at all", {"Content-Encoding": "gzip"}),
    "future-dated": lambda h: (json.dumps(make_batch(h, start=T0 + timedelta(days=3650))).encode(), {}),
    "another node's": lambda h: (json.dumps(make_batch("gpu-someone-else", start=T0)).encode(), {}),
    "huge": lambda h: (json.dumps(make_batch(h, start=T0, count=40)).encode(), {}),
}


SERIAL = itertools.count()


def answers_of_both_roads(app: AgentReportsApp, case: str, *, token_of: Any = None) -> tuple[Any, Any]:
    """The answer of each road (WSGI through Django's test client, ASGI) for the same case, each
    posted as a node of its own; host names are blanked in the answers."""
    answers = []
    for road in ("wsgi", "asgi"):
        node = NodeFactory(hostname=f"gpu-{road}-{next(SERIAL):03d}")
        token = issue_agent_token(node.pk, actor=Actor.system("test"))
        token = token_of(node, token) if token_of else token
        body, headers = CASES[case](node.hostname)
        if road == "wsgi":
            extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
            response = AgentClient(token).post(body, token=token, **extra)
            status, got, content = response.status_code, dict(response.items()), response.content
            got = {k.lower(): v for k, v in got.items()}
        else:
            status, got, content = post(app, body, {**bearer(token), **headers})
        kept = {k: got[k] for k in ("retry-after", "www-authenticate", "content-type") if k in got}
        # Host names, the portal's clock (quoted in a future-dated refusal) and so the body's size differ.
        text = re.sub(r"gpu-(wsgi|asgi)-\d+", "HOST", content.decode())
        text = re.sub(r"Body of \d+ bytes", "Body of N bytes", re.sub(r"\(\d{4}-\d\d-\d\dT[^)]*\)", "(NOW)", text))
        answers.append((status, kept, text))
    return answers[0], answers[1]


@override_settings(TELEMETRY_MAX_BODY_BYTES=64 * 1024)  # "huge" is about 100 kB
@pytest.mark.parametrize("case", list(CASES))
def test_it_answers_as_the_wsgi_road_does(app, case):
    wsgi, asgi = answers_of_both_roads(app, case)
    assert asgi == wsgi
    if case in ("good", "gzipped"):
        assert asgi[0] == 200
    else:
        assert asgi[0] in (400, 403, 413)


def test_it_refuses_a_missing_or_unknown_token_as_the_wsgi_road_does(app):
    assert answers_of_both_roads(app, "good", token_of=lambda node, token: None)[0][0] == 401
    wsgi, asgi = answers_of_both_roads(app, "good", token_of=lambda node, token: None)
    assert asgi == wsgi
    wsgi, asgi = answers_of_both_roads(app, "good", token_of=lambda node, token: "nwa_" + "x" * 43)
    assert asgi == wsgi and asgi[0] == 401 and asgi[1]["www-authenticate"] == "Bearer"


def test_a_revoked_token_is_refused(app):
    def revoked(node: Any, token: str) -> str:
        revoke_agent_tokens(node.pk, actor=Actor.system("test"), reason="test")
        return token

    wsgi, asgi = answers_of_both_roads(app, "good", token_of=revoked)
    assert asgi == wsgi and asgi[0] == 401
    assert NodeReport.objects.count() == 0


def test_a_token_revoked_after_use_is_refused_on_its_next_request(app):
    node = NodeFactory(hostname="gpu-r-001")
    token = issue_agent_token(node.pk, actor=Actor.system("test"))
    assert post(app, json.dumps(make_batch(node.hostname, start=T0)).encode(), bearer(token))[0] == 200
    revoke_agent_tokens(node.pk, actor=Actor.system("test"), reason="test")  # drops the cached token
    status, _, _ = post(
        app, json.dumps(make_batch(node.hostname, start=T0 + timedelta(minutes=1))).encode(), bearer(token)
    )
    assert status == 401
    assert NodeReport.objects.count() == 1


def test_a_resend_is_a_duplicate_even_within_one_group(app):
    node = NodeFactory(hostname="gpu-d-001")
    token = issue_agent_token(node.pk, actor=Actor.system("test"))
    body = json.dumps(make_batch(node.hostname, start=T0)).encode()
    answers = post_all(app, [(body, bearer(token)), (body, bearer(token))])
    assert [json.loads(a[2]) for a in answers] == [{"accepted": 1, "duplicates": 0}, {"accepted": 0, "duplicates": 1}]
    assert json.loads(post(app, body, bearer(token))[2]) == {"accepted": 0, "duplicates": 1}
    assert NodeReport.objects.count() == 1


def test_a_refused_request_leaves_its_rejection_row(app):
    node = NodeFactory(hostname="gpu-j-001")
    token = issue_agent_token(node.pk, actor=Actor.system("test"))
    assert post(app, b"{nope", bearer(token))[0] == 400
    rejection = IngestRejection.objects.get()
    assert (rejection.node_id, rejection.status, rejection.remote_addr) == (node.pk, 400, "127.0.0.1")


@pytest.fixture
def nodes() -> list[Any]:
    made = [NodeFactory(hostname=f"gpu-g-{i:03d}") for i in range(3)]
    return [(node, issue_agent_token(node.pk, actor=Actor.system("test"))) for node in made]


# The group waits (up to 5 s) for its six requests: a loaded machine must not split it.
@override_settings(NODEWARDEN_INGEST_GROUP_WAIT_MS=5000, NODEWARDEN_INGEST_GROUP_MAX=6)
def test_concurrent_requests_share_one_transaction(app, nodes, monkeypatch):
    groups: list[list[int]] = []
    original = groupcommit.ingest_group

    def counting(batches: list[Any], *, source: str) -> list[Any]:
        groups.append([node_id for node_id, _ in batches])
        return original(batches, source=source)

    monkeypatch.setattr("telemetry.api.asgi.ingest_group", counting)
    requests = [
        (json.dumps(make_batch(node.hostname, start=T0 + timedelta(minutes=k), count=1)).encode(), bearer(token))
        for k in range(2)
        for node, token in nodes
    ]
    answers = post_all(app, requests)
    assert [(a[0], json.loads(a[2])) for a in answers] == [(200, {"accepted": 1, "duplicates": 0})] * 6
    assert len(groups) == 1 and len(groups[0]) == 6  # one transaction for the six requests
    assert NodeReport.objects.count() == 6


@override_settings(NODEWARDEN_INGEST_GROUP_WAIT_MS=5000, NODEWARDEN_INGEST_GROUP_MAX=3)
def test_a_failing_group_answers_500_to_each_request_and_stores_none_of_it(app, nodes, monkeypatch):
    from telemetry import ingest

    original = ingest.ingest_many

    def fails_after_storing(batches: list[Any], **kwargs: Any) -> Any:
        original(batches, **kwargs)  # the rows are written, then something that is not a DatabaseError
        raise RuntimeError("a bug in ingest")

    monkeypatch.setattr(groupcommit, "ingest_many", fails_after_storing)
    requests = [(json.dumps(make_batch(node.hostname, start=T0)).encode(), bearer(token)) for node, token in nodes]
    answers = post_all(app, requests)
    assert [a[0] for a in answers] == [500, 500, 500]
    assert NodeReport.objects.count() == 0


@override_settings(NODEWARDEN_INGEST_GROUP_WAIT_MS=5000, NODEWARDEN_INGEST_GROUP_MAX=3)
def test_a_database_that_refuses_every_request_gets_503_for_each(app, nodes, monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseError("the database is gone")

    monkeypatch.setattr(groupcommit, "ingest_many", refuse)
    monkeypatch.setattr(groupcommit, "ingest_reports", refuse)  # the retry of each request on its own
    requests = [(json.dumps(make_batch(node.hostname, start=T0)).encode(), bearer(token)) for node, token in nodes]
    answers = post_all(app, requests)
    assert [(a[0], a[1]["retry-after"]) for a in answers] == [(503, str(groupcommit.RETRY_AFTER_SECONDS))] * 3
    assert NodeReport.objects.count() == 0


def test_the_answer_waits_for_the_commit(app, nodes, monkeypatch):
    seen: list[int] = []
    original = groupcommit.commit_group

    def committing(group: list[Any]) -> None:
        original(group)
        seen.append(NodeReport.objects.count())  # another connection: sees only what is committed

    monkeypatch.setattr(groupcommit, "commit_group", committing)
    node, token = nodes[0]
    status, _, _ = post(app, json.dumps(make_batch(node.hostname, start=T0)).encode(), bearer(token))
    assert status == 200 and seen == [1]


def test_a_full_queue_answers_503_with_retry_after_and_is_counted(app, nodes):
    node, token = nodes[0]
    before = groupcommit.busy_total()
    body = json.dumps(make_batch(node.hostname, start=T0)).encode()

    async def scenario() -> list[Any]:
        # Bound 1: the first request waits for its group (5 s at most); the second finds the queue full.
        first = asyncio.ensure_future(call(app, body, bearer(token)))
        await asyncio.sleep(0.05)
        second = await call(app, body, bearer(token))
        return [await first, second]

    with override_settings(NODEWARDEN_INGEST_QUEUE_LIMIT=1, NODEWARDEN_INGEST_GROUP_WAIT_MS=500):
        first, second = run_async(scenario())
        assert first[0] == 200
        assert (second[0], second[1]["retry-after"]) == (503, str(groupcommit.RETRY_AFTER_SECONDS))
        assert json.loads(second[2])["error"] == "unavailable"
        post(app, json.dumps(make_batch(node.hostname, start=T0 + timedelta(minutes=1))).encode(), bearer(token))
    assert groupcommit.busy_total() == before + 1  # counted by the writer's next group
    assert NodeReport.objects.count() == 2


def test_other_paths_go_to_django(app):
    status, _, _ = run_async(other(app, "GET", "/api/agent/reports/"))
    assert status == 405  # the view's own answer to a GET
    status, _, body = run_async(other(app, "GET", "/login/"))
    assert status == 200 and b"<form" in body  # a page of the portal, through the middleware


async def other(app: AgentReportsApp, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope({}, method=method, path=path), receive, send)
    await sync_to_async(
        lambda: connection.close()
    )()  # the connection of Django's sync thread, before the database goes
    return sent[0]["status"], {}, b"".join(m.get("body", b"") for m in sent[1:])


@override_settings(NODEWARDEN_INGEST_GROUP_WAIT_MS=2000, NODEWARDEN_INGEST_GROUP_MAX=2)
def test_a_request_carrying_an_xid_jumps_the_queue_into_a_group_of_its_own(app, nodes, monkeypatch):
    groups: list[list[int]] = []
    original = groupcommit.ingest_group

    def counting(batches: list[Any], *, source: str) -> list[Any]:
        groups.append([node_id for node_id, _ in batches])
        return original(batches, source=source)

    monkeypatch.setattr("telemetry.api.asgi.ingest_group", counting)
    requests = [(json.dumps(make_batch(node.hostname, start=T0)).encode(), bearer(token)) for node, token in nodes]
    node, token = nodes[2]
    requests.append((json.dumps(xid_batch(node.hostname, T0 + timedelta(minutes=10))).encode(), bearer(token)))
    answers = post_all(app, requests)  # four requests queued in this order, the XID's last; groups of two
    assert [a[0] for a in answers] == [200] * 4
    # The XID's request went first, in a group of its own: its answer waits for no one else's reports.
    assert groups == [[node.pk], [nodes[0][0].pk, nodes[1][0].pk], [node.pk]]
    assert XidRecord.objects.filter(node=node, xid=79).exists()


def test_a_group_slower_than_the_wait_answers_503_and_the_resend_is_a_duplicate(app, nodes, monkeypatch):
    original = groupcommit.commit_group

    def slow(group: list[Any]) -> None:
        time.sleep(1.0)  # a writer far behind (a lock wait, a slow disk)
        original(group)

    monkeypatch.setattr(groupcommit, "commit_group", slow)
    monkeypatch.setattr("telemetry.api.asgi.WAIT_SECONDS", 0.2)
    node, token = nodes[0]
    body = json.dumps(make_batch(node.hostname, start=T0)).encode()
    status, headers, _ = post(app, body, bearer(token))
    assert (status, headers["retry-after"]) == (
        503,
        str(groupcommit.RETRY_AFTER_SECONDS),
    )  # never a 2xx before the commit
    monkeypatch.setattr("telemetry.api.asgi.WAIT_SECONDS", 30.0)
    assert json.loads(post(app, body, bearer(token))[2]) == {"accepted": 0, "duplicates": 1}  # committed meanwhile


def test_the_lean_request_reads_like_django_s_own():
    # telemetry.api.asgi._AgentRequest skips HttpRequest.__init__: what the vetting reads must
    # still be there, and what it skipped must still come on demand.
    from telemetry.api.asgi import _AgentRequest

    body = b'{"reports": []}'
    meta = {"REQUEST_METHOD": "POST", "HTTP_AUTHORIZATION": "Bearer x", "CONTENT_LENGTH": str(len(body))}
    request = _AgentRequest("/api/agent/reports/", meta, body)
    assert request.headers["Authorization"] == "Bearer x"
    assert request.method == "POST" and request.path == request.path_info == "/api/agent/reports/"
    assert request.read() == body
    assert not request.GET and not request.POST and not request.FILES and request.COOKIES == {}
    assert request.get_full_path() == "/api/agent/reports/"


@pytest.mark.parametrize(("accepted", "duplicates"), [(1, 0), (0, 1), (37, 463)])
def test_a_stored_request_is_answered_as_the_wsgi_view_answers_it(accepted, duplicates):
    outcome = IngestResult(accepted=accepted, duplicates=duplicates)
    view = answer_agent_reports(None, VettedReports(1, "gpu-a-001", [], b""), outcome)  # type: ignore[arg-type]
    assert _stored(outcome) == _wire(view)
    assert json.loads(_stored(outcome)[2]) == {"accepted": accepted, "duplicates": duplicates}


def test_the_ingest_process_collects_young_objects_after_a_group_s_worth():
    # nodewarden.asgi_ingest: the entry point granian loads freezes what it loaded and raises the
    # young generation's threshold, in its own process (a subprocess here: the test's own collector
    # is left alone).
    code = (
        "import gc, nodewarden.asgi_ingest as m;"
        " print(gc.get_threshold()[0], m.YOUNG_COLLECTION_THRESHOLD, gc.get_freeze_count() > 0)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "sandbox.settings")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.split() == ["50000", "50000", "True"]
