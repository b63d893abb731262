"""Benchmark telemetry ingest end to end, against PostgreSQL's own bulk-insert ceiling.

What it measures, in one run on one machine (figures are only comparable as ratios):
(a) end-to-end throughput: realistic 8-GPU H100 reports POSTed over HTTP to
    /api/agent/reports/ (the ASGI ingest app under granian as deployed, or --server uvicorn / gunicorn;
    keep-alive connections from a uvloop client, one token per node),
    validated, stored in PostgreSQL (history, latest state) and run through the
    health rules, in reports/s. Two shapes: one report per request (the steady
    state: every node every 30 s, each report dated when it is sent, as an agent dates it)
    and 50 reports per request (a node flushing its on-disk buffer after an outage: past
    reports, 30 s apart, of a second fleet of as many nodes);
(b) the raw ceiling: the same history rows written with COPY straight into the
    same tables by one connection, in reports/s; the ratio a/b;
(a') the same single-report load offered at a fixed rate (--rate, default the goal's 2,500/s),
    open loop: each of many connections sends on its own schedule whether or not the others
    have their answers, as a fleet's agents post on their own timers. (a) is closed loop: its
    48 connections each wait for their answer, so it tops out at 48 / latency however much CPU
    is left; (a') shows whether the server keeps up with the rate a fleet offers, and at what
    latency (p50/p99 per request) and CPU;
(a'') the closed loop again on as many connections as (a') (3 x 64): a fleet has far more agents
    posting at once than 48, and group commit turns the extra concurrency into larger groups, so
    that the server's CPU, not 48 / latency, is the bound. The ratio a/b takes the best of (a),
    (a'') and (a') where it kept up; (a)'s own ratio is printed beside it;
(c) latency of a catastrophic XID: while (a)'s single-report load runs, a probe
    posts reports carrying an XID 79; the response comes back only after the
    finding and its lifecycle event are committed, so the round trip bounds the
    time from arrival to committed finding. p50/p99 in ms.

Target (issue 3): >= 3,000 reports/s end to end (90,000 nodes at 30 s) and within a
third of the raw ceiling; XID p99 < 200 ms.

Needs PostgreSQL (COPY): run it through ``bin/bench``, which starts a throwaway
server. Usage: bin/bench ingest [--nodes 2000] [--seconds 15] [--clients 3] [--workers 2]
[--server granian|granian-asgi|uvicorn|gunicorn] [--compare [SERVER ...]] [--rate 2500]. CPU per report is printed per party (server
processes, PostgreSQL, clients) from /proc and getrusage over the measured window: on a shared
machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ["DEBUG"] = "0"  # DEBUG keeps every query in memory and would skew the figures

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

BATCH_FLUSH = 50
# A single-report load is dated as an agent dates its reports: when it sends them (``LIVE``). A
# flush of BATCH_FLUSH reports is an agent's buffer after an outage, 30 s apart, dated from START
# on, its mode's offset (in 30 s steps) after it: in the past (the portal refuses a report from its
# future). Its nodes are others than the live load's: dated before their live reports, its reports
# would not be new.
START = (datetime.now(UTC) - timedelta(days=3 * 365)).replace(hour=0, minute=0, second=0, microsecond=0)
LIVE = None  # a load's offset: each report dated when it is sent


# --- Fleet and payloads ---------------------------------------------------------


def make_fleet(n: int, first: int = 0) -> list[tuple[str, str]]:
    """n nodes of an 8 x H100 profile, numbered from ``first``, each with an agent token; returns
    [(hostname, token)]."""
    from bench.place import h100_place
    from nodes.models import Node
    from telemetry.auth import TOKEN_PREFIX, hash_token
    from telemetry.models import AgentToken

    profile, site, cluster = h100_place()
    nodes = Node.objects.bulk_create(
        Node(
            hostname=f"bench-{i:05d}",
            serial=f"BENCH{i:06d}",
            bmc_address=f"10.250.{i // 250}.{i % 250}",
            site=site,
            cluster=cluster,
            hardware_profile=profile,
            state="production",
        )
        for i in range(first, first + n)
    )
    tokens = [TOKEN_PREFIX + uuid.uuid4().hex + uuid.uuid4().hex for _ in nodes]
    AgentToken.objects.bulk_create(
        AgentToken(node=node, key_hash=hash_token(tok), prefix=tok[:12])
        for node, tok in zip(nodes, tokens, strict=True)
    )
    return [(node.hostname, tok) for node, tok in zip(nodes, tokens, strict=True)]


def report_template(hostname: str) -> str:
    """A realistic 8-GPU report as JSON text with REPORT_ID / COLLECTED_AT placeholders."""
    from telemetry.testing import make_report

    report = make_report(hostname, collected_at=START, gpus=8, seed=hash(hostname) & 0xFFFF)
    report["report_id"] = "REPORT_ID_PLACEHOLDER"
    report["collected_at"] = "COLLECTED_AT_PLACEHOLDER"
    return json.dumps(report, separators=(",", ":"))


def fill(template: str, when: datetime) -> str:
    return template.replace("REPORT_ID_PLACEHOLDER", uuid.uuid4().hex).replace(
        "COLLECTED_AT_PLACEHOLDER", when.isoformat()
    )


def with_xid(template: str, when: datetime, pci: str) -> str:
    report = json.loads(fill(template, when))
    line = f"NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    report["xid_events"] = [
        {
            "xid": 79,
            "observed_at": when.isoformat(),
            "raw": line,
            "pci_bus_id": pci,
            "message": "GPU has fallen off the bus.",
        }
    ]
    return json.dumps(report, separators=(",", ":"))


# --- HTTP load --------------------------------------------------------------------


def _post(conn: http.client.HTTPConnection, token: str, body: bytes) -> tuple[int, bytes]:
    conn.request(
        "POST",
        "/api/agent/reports/",
        body=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    return response.status, response.read()


class Template:
    """A report's JSON as bytes around its two placeholders: a request is a few joins, no JSON."""

    def __init__(self, hostname: str, token: str, template: str) -> None:
        head, rest = template.split("REPORT_ID_PLACEHOLDER")
        middle, tail = rest.split("COLLECTED_AT_PLACEHOLDER")
        self.parts = (head.encode(), middle.encode(), tail.encode())
        self.head = (
            f"POST /api/agent/reports/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()

    def request(self, whens: list[datetime]) -> bytes:
        head, middle, tail = self.parts
        reports = b",".join(
            b"".join((head, uuid.uuid4().hex.encode(), middle, when.isoformat().encode(), tail)) for when in whens
        )
        body = b'{"reports":[' + reports + b"]}"
        return b"".join((self.head, str(len(body)).encode(), b"\r\n\r\n", body))


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    """One request on a keep-alive connection; the status and the body of its answer."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:  # gunicorn's answers (the WSGI road) carry no length
        chunks = []
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            chunks.append((await reader.readexactly(size + 2))[:-2])
        await reader.readuntil(b"\r\n")
        return status, b"".join(chunks)
    at = lower.find(b"content-length:")
    length = int(lower[at + 15 : lower.index(b"\r\n", at)]) if at >= 0 else 0
    return status, await reader.readexactly(length)


def load_client(
    port: int,
    fleet: list[tuple[str, str, str]],
    per_request: int,
    seconds: float,
    offset: int | None,
    connections: int,
    results: mp.Queue,
    start: Any,
    rate: float = 0.0,
) -> None:
    """One client process: ``connections`` keep-alive connections on one uvloop event loop, each
    round-robin over its share of the nodes until time is up, as many agents posting at once
    would; requests are pre-built bytes (no HTTP library, no JSON encoding) so that the client is
    not the cap. Still one report per request, each answer read and counted.

    The steady state is measured, not a cold start: each connection first posts one report of
    each node of its share, uncounted, so the server's workers have booted and hold the tokens
    in their caches (as they do a minute after a restart); then all client processes start the
    measured ``seconds`` together (``start``, a barrier across processes)."""
    import uvloop

    results.put(uvloop.run(_load(port, fleet, per_request, seconds, offset, connections, start, rate)))


async def _load(
    port: int,
    fleet: list[tuple[str, str, str]],
    per_request: int,
    seconds: float,
    offset: int | None,
    connections: int,
    start: Any,
    rate: float = 0.0,
) -> tuple[Any, ...]:
    """``rate`` > 0: open loop, this client's share of the offered requests/s, each connection on
    its own schedule (a request late by more than a period is counted in ``late``)."""
    loop = asyncio.get_running_loop()
    templates = [Template(hostname, token, template) for hostname, token, template in fleet]
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    warm_started = time.perf_counter()

    def dated(template: Template, step: int, reports: int = per_request) -> bytes:
        """A node's request of ``step`` (its ``reports`` reports), dated as the mode's offset says;
        the warm-up's one report (step -1) comes just before the first measured one."""
        if offset is LIVE:  # one report a request (run_load)
            return template.request([datetime.now(UTC)])
        base = START + timedelta(seconds=30 * ((offset + step) * per_request + per_request - reports))
        return template.request([base + timedelta(seconds=30 * k) for k in range(reports)])

    async def warm_up(i: int) -> int:
        reader, writer = streams[i]
        share = templates[i::connections]
        warmed = 0
        for template in share:
            status, payload = await _exchange(reader, writer, dated(template, -1, reports=1))
            if status == 200:
                warmed += json.loads(payload)["accepted"]
        return warmed

    warmed = sum(await asyncio.gather(*(warm_up(i) for i in range(connections))))
    warm_seconds = time.perf_counter() - warm_started
    await loop.run_in_executor(None, start.wait)
    began = time.perf_counter()
    cpu_began = _own_cpu()
    deadline = began + seconds

    latencies: list[float] = []
    late = 0
    period = connections / rate if rate > 0 else 0.0

    async def measured(i: int) -> tuple[int, int, int, int]:
        nonlocal late
        reader, writer = streams[i]
        share = templates[i::connections]
        sent = accepted = errors = busy = step = 0
        due = began + period * i / connections  # open loop: connections evenly staggered
        while time.perf_counter() < deadline:
            if period:
                now = time.perf_counter()
                if now < due:
                    await asyncio.sleep(due - now)
                elif now > due + period:
                    late += 1  # the previous answer took longer than a period: behind schedule
                due += period
            request = dated(share[step % len(share)], step // len(share))
            asked = time.perf_counter()
            status, payload = await _exchange(reader, writer, request)
            latencies.append(time.perf_counter() - asked)
            if status == 503:  # backpressure: the agent keeps the report and resends after Retry-After
                busy += 1
                await asyncio.sleep(0.05)
                continue
            sent += per_request
            if status == 200:
                accepted += json.loads(payload)["accepted"]
            else:
                errors += 1
                if errors < 3:
                    print(f"  HTTP {status}: {payload[:300]!r}", file=sys.stderr)
            step += 1
        return sent, accepted, errors, busy

    totals = await asyncio.gather(*(measured(i) for i in range(connections)))
    measured_seconds = time.perf_counter() - began
    cpu = _own_cpu() - cpu_began
    for _reader, writer in streams:
        writer.close()
    return (
        *(sum(t[k] for t in totals) for k in range(4)),
        *(measured_seconds, warmed, warm_seconds, cpu, latencies, late),
    )


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def xid_probe(port: int, fleet: list[tuple[str, str, str]], count: int, results: mp.Queue, start: Any) -> None:
    """Post ``count`` reports carrying XID 79, one at a time, timing each round trip (from the
    measured load's start on)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start.wait()
    latencies = []
    accepted = 0
    for i in range(count):
        _hostname, token, template = fleet[i % len(fleet)]
        body = ('{"reports":[' + with_xid(template, datetime.now(UTC), "0000:18:00") + "]}").encode()
        started = time.perf_counter()
        status, payload = _post(conn, token, body)
        latencies.append(time.perf_counter() - started)
        if status == 200:
            accepted += json.loads(payload)["accepted"]
        else:
            print(f"  XID probe HTTP {status}: {payload[:300]!r}", file=sys.stderr)
        time.sleep(0.02)
    results.put((latencies, accepted))


@dataclass
class Load:
    """What one load run measured."""

    rate: float
    accepted: int
    errors: int
    busy: int
    latencies: list[float]
    warm: int  # accepted in the uncounted warm-up
    warm_rate: float  # reports/s of the warm-up: each node's first report to a fresh server (tokens unknown)
    cpu_ms: dict[str, float]  # CPU per report accepted in the measured window, per party (server, PostgreSQL, client)
    request_ms: list[float]  # each measured request's round trip, sorted
    late: int  # open loop: requests sent more than a period after their time
    offered: float  # open loop: the requests/s offered (0: closed loop)


def run_load(
    server: Server,
    fleet: list[tuple[str, str, str]],
    *,
    clients: int,
    connections: int,
    per_request: int,
    seconds: float,
    offset: int | None,
    probe: int = 0,
    rate: float = 0.0,
) -> Load:
    if offset is LIVE and per_request != 1:
        raise ValueError("a live load sends one report a request: an agent's buffer holds past reports")
    results: mp.Queue = mp.Queue()
    start = mp.Barrier(clients + (1 if probe else 0) + 1)  # and this process: it reads the CPU counters
    share = [fleet[i::clients] for i in range(clients)]
    port = server.port
    procs = [
        mp.Process(
            target=load_client,
            args=(port, share[i], per_request, seconds, offset, connections, results, start, rate / clients),
        )
        for i in range(clients)
    ]
    probe_q: mp.Queue = mp.Queue()
    if probe:
        procs.append(mp.Process(target=xid_probe, args=(port, fleet[:50], probe, probe_q, start)))
    for p in procs:
        p.start()
    start.wait()
    before = (tree_cpu(server.proc.pid), tree_cpu(server.postmaster))
    totals = [results.get() for _ in range(clients)]
    after = (tree_cpu(server.proc.pid), tree_cpu(server.postmaster))
    latencies, probed = probe_q.get() if probe else ([], 0)
    for p in procs:
        p.join()
    elapsed = max(t[4] for t in totals)  # the measured window, warm-up left out
    accepted = sum(t[1] for t in totals)
    warm = sum(t[5] for t in totals)
    errors, busy = sum(t[2] for t in totals), sum(t[3] for t in totals)
    counted = max(1, accepted + probed)
    cpu_ms = {
        "server": (after[0] - before[0]) / counted * 1e3,
        "PostgreSQL": (after[1] - before[1]) / counted * 1e3,
        "client": sum(t[7] for t in totals) / counted * 1e3,
    }
    warm_rate = warm / max(t[6] for t in totals)
    request_ms = sorted(ms * 1e3 for t in totals for ms in t[8])
    late = sum(t[9] for t in totals)
    return Load(
        accepted / elapsed, accepted + probed, errors, busy, latencies, warm, warm_rate, cpu_ms, request_ms, late, rate
    )


# --- CPU from /proc -----------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, living or reaped."""
    stats: dict[int, tuple[int, float, float]] = {}  # pid -> (ppid, own, reaped children's)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) ": state is fields[0]
        ppid = int(fields[1])
        own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        stats[int(entry)] = (ppid, own, reaped)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1] + stats[pid][2]
            todo.extend(children.get(pid, []))
    return total


def postmaster_pid() -> int:
    """This benchmark's PostgreSQL server: the parent of this connection's backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    raw = Path(f"/proc/{backend}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[1])


# --- The server -------------------------------------------------------------------

SERVERS = ("granian", "granian-asgi", "uvicorn", "gunicorn")


@dataclass
class Server:
    """A running ingest server: its process, its port, and the PostgreSQL server it writes to."""

    proc: subprocess.Popen
    port: int
    postmaster: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(server: str, port: int, workers: int, worker_class: str, threads: int) -> list[str]:
    """The ingest server as deployed (docs/production.md): the app under granian's RSGI interface
    (granian), or its ASGI one under granian (granian-asgi) or uvicorn (httptools, uvloop), or the
    WSGI portal under gunicorn (the road before the ASGI one)."""
    bin_dir = Path(sys.executable).parent
    if server == "uvicorn":
        return [
            *(str(bin_dir / "uvicorn"), "nodewarden.asgi_ingest:application", "--port", str(port)),
            *("--workers", str(workers), "--loop", "uvloop", "--http", "httptools", "--no-proxy-headers"),
            *("--no-access-log", "--log-level", "warning", "--timeout-keep-alive", "30"),
        ]
    if server in ("granian", "granian-asgi"):
        interface = "rsgi" if server == "granian" else "asgi"
        return [
            *(str(bin_dir / "granian"), "--interface", interface, "--port", str(port), "--workers", str(workers)),
            *("--loop", "uvloop", "--no-ws", "--log-level", "warning", "nodewarden.asgi_ingest:application"),
        ]
    return [
        *(str(bin_dir / "gunicorn"), "nodewarden.wsgi:application", "--bind", f"127.0.0.1:{port}"),
        *("--workers", str(workers), "--worker-class", worker_class, "--threads", str(threads)),
        *("--keep-alive", "30", "--log-level", "warning"),
    ]


def start_server(server: str, workers: int, worker_class: str, threads: int) -> Server:
    port = free_port()
    command = server_command(server, port, workers, worker_class, threads)
    proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "DEBUG": "0"})
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return Server(proc, port, postmaster_pid())
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{server} did not start")


# --- The raw ceiling -------------------------------------------------------------


def copy_ceiling(fleet: list[tuple[str, str, str]], reports: int) -> float:
    """Reports/s when the same history rows (one NodeReport and eight GpuSample rows per
    report) go straight in with COPY on one connection, 500 reports per transaction:
    no HTTP, no validation, no latest state, no rules. The bar for (a)."""
    import msgspec
    from django.db import transaction
    from psycopg.types.json import Jsonb

    from nodes.models import Node
    from telemetry import ingest, store
    from telemetry.schema import decode_batch

    node_ids = dict(Node.objects.values_list("hostname", "id"))
    when = START + timedelta(days=3000)
    parsed = []
    for i in range(reports):
        hostname, _, template = fleet[i % len(fleet)]
        body = '{"reports":[' + fill(template, when + timedelta(seconds=30 * (i // len(fleet)))) + "]}"
        parsed.append((node_ids[hostname], decode_batch(body.encode())[0]))
    received = datetime.now(UTC)
    report_rows = [ingest._report_row(node_id, r, received, "bench") for node_id, r in parsed]
    sample_rows = [
        [
            {
                "node_id": node_id,
                "collected_at": r.collected_at,
                "gpu_index": g.index,
                **{name: getattr(g, name) for name in store.SAMPLE_FIELDS},
            }
            for g in r.gpus
        ]
        for node_id, r in parsed
    ]
    q = connection.ops.quote_name
    report_sql = (
        f"COPY {q(store.NodeReport._meta.db_table)} ({', '.join(q(c) for c in store.REPORT_COLUMNS)}) FROM STDIN"
    )
    sample_sql = (
        f"COPY {q(store.GpuSample._meta.db_table)} ({', '.join(q(c) for c in store.SAMPLE_COLUMNS)}) FROM STDIN"
    )
    chunk = 500
    started = time.perf_counter()
    for first in range(0, reports, chunk):
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.cursor.copy(report_sql) as copy:
                for row in report_rows[first : first + chunk]:
                    copy.write_row(
                        [Jsonb(msgspec.to_builtins(row[c])) if c == "summary" else row[c] for c in store.REPORT_COLUMNS]
                    )
            with cursor.cursor.copy(sample_sql) as copy:
                for rows in sample_rows[first : first + chunk]:
                    for row in rows:
                        copy.write_row([row[c] for c in store.SAMPLE_COLUMNS])
    return reports / (time.perf_counter() - started)


def count_stored() -> int:
    from telemetry.models import NodeReport

    return NodeReport.objects.count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--clients", type=int, default=3, help="client processes")
    parser.add_argument("--connections", type=int, default=16, help="keep-alive connections per client process")
    parser.add_argument("--server", choices=SERVERS, default="granian", help="gunicorn: the WSGI road (before)")
    parser.add_argument(
        "--compare",
        nargs="*",
        choices=SERVERS,
        help="only the 1 report/request load, on each server named (default: all) in turn, with CPU per report",
    )
    parser.add_argument("--workers", type=int, default=2, help="server processes (the scale-out figure uses 1 too)")
    # gunicorn: gthread keeps the agents' connections open, as a fleet behind a load balancer would, and its
    # threads are what telemetry.groupcommit groups; sync workers close every connection.
    parser.add_argument("--worker-class", choices=["sync", "gthread"], default="gthread")
    parser.add_argument("--threads", type=int, default=32, help="threads per gthread worker")
    parser.add_argument("--xid-probes", type=int, default=200)
    parser.add_argument("--rate", type=float, default=2500, help="open loop: single-report requests/s offered")
    parser.add_argument("--compare-open", action="store_true", help="--compare with the open loop (--rate)")
    parser.add_argument(
        "--open-connections", type=int, default=64, help="open loop: connections per client process (one agent each)"
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("bench/ingest.py needs PostgreSQL (COPY): run it with bin/bench ingest")
    call_command("migrate", verbosity=0)
    print(
        f"PostgreSQL {connection.cursor().connection.info.server_version}; {os.cpu_count()} CPUs; "
        f"{args.nodes} nodes x 8 GPUs; {args.server} x {args.workers} processes"
        f"{f' ({args.worker_class} x {args.threads} threads)' if args.server == 'gunicorn' else ''}; "
        f"{args.clients} client processes x {args.connections} connections; "
        f"group commit wait {os.environ.get('NODEWARDEN_INGEST_GROUP_WAIT_MS', 'default')} ms"
    )
    fleet = [(h, t, report_template(h)) for h, t in make_fleet(args.nodes)]
    flushing = [(h, t, report_template(h)) for h, t in make_fleet(args.nodes, first=args.nodes)]
    connection.close()
    load = {"clients": args.clients, "connections": args.connections, "seconds": args.seconds}

    def serve(workers: int, runs: list[tuple[str, dict[str, Any]]], kind: str = args.server) -> dict[str, Load]:
        server = start_server(kind, workers, args.worker_class, args.threads)
        try:
            return {name: run_load(server, extra.pop("fleet", fleet), **{**load, **extra}) for name, extra in runs}
        finally:
            server.proc.terminate()
            server.proc.wait()

    if args.compare is not None:
        open_loop = {"rate": args.rate, "connections": args.open_connections} if args.compare_open else {}
        compare(serve, args.workers, args.compare or SERVERS, open_loop)
        return
    one = serve(1, [("single", {"per_request": 1, "offset": LIVE})])["single"]
    runs = serve(
        args.workers,
        [
            ("single", {"per_request": 1, "offset": LIVE}),
            # Before the XID probe's findings open alerts on 50 nodes (their reports then run every rule).
            ("saturated", {"per_request": 1, "offset": LIVE, "connections": args.open_connections}),
            ("batch", {"per_request": BATCH_FLUSH, "offset": 10_000, "fleet": flushing}),
            ("xid", {"per_request": 1, "offset": LIVE, "probe": args.xid_probes}),
            ("offered", {"per_request": 1, "offset": LIVE, "rate": args.rate, "connections": args.open_connections}),
        ],
    )
    stored = count_stored()
    accepted = sum(r.accepted + r.warm for r in (one, *runs.values()))
    single, saturated, batch, xid, offered = (runs[k] for k in ("single", "saturated", "batch", "xid", "offered"))
    ceiling = copy_ceiling(fleet, reports=max(20_000, saturated.accepted))
    lat_ms = sorted(x * 1000 for x in xid.latencies)
    p99 = percentile(lat_ms, 99)
    busy = sum(r.busy for r in (one, *runs.values()))
    kept_up = offered.rate >= 0.98 * offered.offered and offered.late == 0 and not offered.errors
    print(
        f"end to end, 1 report/request, offered {offered.offered:,.0f}/s open loop "
        f"({args.clients} x {args.open_connections} connections, each on its own schedule):"
    )
    print(
        f"  {offered.rate:8,.0f} reports/s  ({offered.accepted:,} accepted, {offered.errors} errors, "
        f"{offered.late} sent late)  request p50 {percentile(offered.request_ms, 50):.1f} ms, "
        f"p99 {percentile(offered.request_ms, 99):.1f} ms; goal 2,500: {offered.rate / 2500:.2f}"
        f" ({'kept up' if kept_up else 'fell behind'})"
    )
    print(f"  CPU per report: {cpu_line(offered)}; {offered.rate * sum(offered.cpu_ms.values()) / 1e3:.2f} cores busy")
    print(
        f"closed loop, 1 report/request:  {single.rate:8,.0f} reports/s  ({single.accepted:,} accepted, "
        f"{single.errors} errors; {args.clients} x {args.connections} connections each waiting for its answer: "
        f"request p50 {percentile(single.request_ms, 50):.1f} ms, p99 {percentile(single.request_ms, 99):.1f} ms)"
    )
    print(f"  CPU per report: {cpu_line(single)}")
    connections = args.clients * args.open_connections
    print(
        f"closed loop, {connections} connections: {saturated.rate:8,.0f} reports/s  ({saturated.accepted:,} accepted, "
        f"{saturated.errors} errors; as many connections as the open loop, each waiting for its answer, so that the "
        f"server and not the clients' {args.clients * args.connections} is the bound: request p50 "
        f"{percentile(saturated.request_ms, 50):.1f} ms, p99 {percentile(saturated.request_ms, 99):.1f} ms)"
    )
    print(f"  CPU per report: {cpu_line(saturated)}")
    print(
        f"  with 1 ingest process:        {one.rate:8,.0f} reports/s  (2 processes / 1: {single.rate / one.rate:.2f})"
    )
    print(
        f"end to end, {BATCH_FLUSH} reports/request: {batch.rate:8,.0f} reports/s  ({batch.accepted:,} accepted, "
        f"{batch.errors} errors)"
    )
    print(f"  CPU per report: {cpu_line(batch)} (the per-request cost spread over {BATCH_FLUSH} reports)")
    print(
        f"  first report of each node to a fresh server (cold token cache, worker boot): {one.warm_rate:,.0f} reports/s"
    )
    print(f"raw COPY ceiling:               {ceiling:8,.0f} reports/s")
    # The ratio of what one report per request can sustain: the closed loops' rate, or the open
    # loop's where it kept up (it is then bounded by the offered rate, not by the server). The
    # closed loop of the clients' few connections is bounded by connections / latency, printed too.
    sustained = max(single.rate, saturated.rate, offered.rate if kept_up else 0.0)
    print(
        f"ratio end-to-end/ceiling:       {sustained / ceiling:8.2f} (1/request, goal 0.3: "
        f"{sustained / ceiling / 0.3:.2f}; with {args.clients * args.connections} connections "
        f"{single.rate / ceiling:.2f})  {batch.rate / ceiling:.2f} ({BATCH_FLUSH}/request)"
    )
    print(
        f"XID 79 to committed finding:    p50 {statistics.median(lat_ms):.1f} ms  p99 {p99:.1f} ms  "
        f"(n={len(lat_ms)}, under load, {xid.errors} load errors; goal p99 < 200 ms: {p99 / 200:.2f} of it)"
    )
    print(f"503 + Retry-After (backpressure), resent by the clients: {busy:,}")
    print(f"reports stored: {stored:,}; accepted and missing: {max(0, accepted - stored):,} (goal 0)")


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, int(len(sorted_values) * p / 100) - 1))]


def cpu_line(load: Load) -> str:
    parties = ", ".join(f"{party} {ms:.2f} ms" for party, ms in load.cpu_ms.items())
    return f"{parties}; all {sum(load.cpu_ms.values()):.2f} ms"


def compare(serve: Any, workers: int, servers: Iterable[str], open_loop: dict[str, Any]) -> None:
    """The same 1 report/request load against each server, back to back: rate and CPU per report
    (``open_loop``: offered at its rate on its connections, else the closed loop)."""
    accepted = 0
    for kind in servers:
        shape = {"per_request": 1, "offset": LIVE, **open_loop}
        load = serve(workers, [("single", shape)], kind)["single"]
        accepted += load.accepted + load.warm
        print(
            f"{kind:9} x {workers}: {load.rate:7,.0f} reports/s, {load.errors} errors, {load.busy} 503s, "
            f"{load.late} late; request p50 {percentile(load.request_ms, 50):.1f} ms, "
            f"p99 {percentile(load.request_ms, 99):.1f} ms; CPU per report: {cpu_line(load)}"
        )
    stored = count_stored()
    print(f"reports stored: {stored:,}; accepted and missing: {max(0, accepted - stored):,} (goal 0)")


if __name__ == "__main__":
    main()
