"""Benchmark remediation end to end: from a catastrophic XID to a cordon in Slurm, and back.

Everything is real and runs on this machine: PostgreSQL and Redis (``bin/bench`` starts
them), Celery worker subprocesses on the four queues (``--workers`` processes, each
``--concurrency`` prefork children), gunicorn serving the agent API, the Redfish emulator
(sushy-tools, a fixed ``--power-delay``) and a Slurm 22.05 cluster (munged, slurmctld,
slurmd; ``sandbox.emulators.slurm``). The bench process only sends reports and watches Slurm
and the database. No Celery beat runs: nothing here waits for a periodic task.

(a) Latency, XID to cordon: one node at a time, the agent's POST /api/agent/reports/
    carrying an XID 79 line goes through gunicorn and the real ingest; the clock stops
    when ``scontrol show node`` (the adapter's ``show_node``, polled every 25 ms: each
    call costs ~9 ms of CPU, so faster polling would take a core from what is measured)
    shows the DRAIN flag with a "nodewarden:" reason. These nodes each run a Slurm job
    (``sleep``) when the XID arrives, so the remediation also evicts (requeues) it, as
    for a GPU that falls off the bus under a job. p50/p99 over ``--probes`` nodes.
(b) Throughput, many cordons: ``--burst`` nodes' XID reports are ingested in-process
    (``telemetry.ingest.ingest_reports``, one savepoint each) inside ONE transaction,
    so every finding commits, and their consideration is queued (one ``consider_findings``
    task for the commit), at the same instant; the clock runs from just before that commit until Slurm lists the last of
    them drained by nodewarden (``sinfo -N -t drain``, every 0.1 s: one call for all
    nodes). These nodes are in slurm.conf without a slurmd (``unk*``): 200 more slurmd
    processes on 2 cores would measure this machine's process table, not Nodewarden,
    and the Slurm emulator's (sandbox/emulators/slurm.py) free ports collide at that count. The CPU seconds each party used
    meanwhile are printed (from /proc), with what the rest of the machine used: it is
    shared, and other processes' load shows up in the figure.
(c) One full cycle on an idle node with a slurmd and a BMC on the emulator: XID POST ->
    cordon -> BMC power cycle -> re-validation (the "back from remediation" plan: the
    reliability stage alone, with a zero soak, as in tests/remediation/conftest.py) ->
    back in production and resumed in Slurm. Split (see ``cycle_split``):
    - waiting on the BMC: the power-cycle step from the moment the worker took it up
      (``RemediationStep.last_activity``) to its end (``finished``); of that, the
      emulator's own delay is 2 x ``--power-delay`` (off, then on) and the rest is the
      BMC client's polling (``NODEWARDEN_BMC_POLL_INTERVAL``, 2 s by default) and HTTP;
    - waiting on checks: the re-validation stage runs (``Run`` started -> finished);
    - the controller's own time: the rest of the wall clock (Celery hops, database work,
      the decisions, scontrol/squeue calls, follow-ups between stages).

Safety rails, and why the figures are not flattered by switching them off:
- Blast-radius limits are raised for the bench (a ``BlastRadiusLimit`` row for the
  cluster domain: max share 1.0, 100,000 nodes, 100,000 drains an hour). The defaults
  (10 %, 50 nodes, 20 drains an hour) would rightly queue (b) after 20 nodes.
- The circuit breaker stays armed and is evaluated for every finding, as in production.
  Its thresholds are module constants (30 % of a cluster, at least 5 nodes, 10 minutes).
  It does not trip because the cluster is sized so that it should not: every measured
  node belongs to one cluster of ``--cluster-size`` nodes (default 1,200), so the 251
  nodes with findings are ~21 % of it, a large incident below the 30 % line. The
  other nodes exist in the database only (serving, never touched), not in slurm.conf.
  The script checks afterwards that no breaker tripped and nothing was queued.
- A bench-only ``RemediationPolicy`` (XID 79: cordon now, first rung repair) is used
  for (a) and (b): after the cordon the node is handed to a repair ticket by the rungs'
  task (``remediation.tasks.start_rungs``, queued once the batch's cordons commit; nothing for
  the BMC to do, so 250 power cycles do not occupy the workers for minutes). Those tasks
  share the workers and the cores with the cordons, so they count against (b) as the
  default rung's start would. (c) switches to a second policy (XID 79: cordon now, first rung BMC power
  cycle). remediation/ itself is not changed or patched.

Targets (issue 6): (a) p99 < 1 s; (b) >= 50 cordons/s; (c) the controller's own share
under 5 s (seed reference: the whole cycle under two minutes).

Usage: bin/bench remediation [--probes 50] [--burst 200] [--workers 2] [--concurrency 2]
                             [--power-delay 0.5] [--cluster-size 1200]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sandbox.settings")  # the emulators are sandbox apps
os.environ["DEBUG"] = "0"  # DEBUG keeps every query in memory and would skew the figures

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from bench.ingest import start_server  # noqa: E402

XID = 79
WORKER_START_TIMEOUT = 60.0
# Seconds between looks at Slurm while one node is watched. Each ``scontrol`` call costs ~9 ms of CPU
# on this machine: polling faster would take a core from what is measured.
POLL = 0.025


# --- Processes (every one stopped on exit) ------------------------------------------------------


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start_workers(stack: contextlib.ExitStack, count: int, concurrency: int, logdir: Path) -> list[Worker]:
    """``count`` ``celery worker`` processes on every queue, as a deployment starts them; ready on return."""
    from nodewarden.celery import QUEUE_NAMES

    workers = []
    for i in range(count):
        log = logdir / f"worker-{i}.log"
        with log.open("wb") as out:
            # A session of its own: on exit the whole group (the prefork children too) is killed.
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "nodewarden",
                    "worker",
                    "--queues",
                    ",".join(QUEUE_NAMES),
                    "--pool",
                    "prefork",
                    "--concurrency",
                    str(concurrency),
                    "--loglevel",
                    "INFO",
                    "--hostname",
                    f"bench-{i}-{os.getpid()}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                cwd=ROOT,
                env={**os.environ, "DEBUG": "0"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        worker = Worker(proc, log)
        stack.callback(stop_worker, worker)
        workers.append(worker)
    deadline = time.monotonic() + WORKER_START_TIMEOUT
    while not all(" ready." in w.log.read_text(errors="replace") for w in workers):
        for w in workers:
            if w.proc.poll() is not None:
                raise SystemExit(f"a Celery worker exited {w.proc.returncode}:\n{w.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit("Celery workers did not start:\n" + "\n".join(w.tail() for w in workers))
        time.sleep(0.1)
    return workers


def stop_worker(worker: Worker) -> None:
    if worker.proc.poll() is None:
        worker.proc.terminate()  # warm shutdown: the running task finishes
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.pid, signal.SIGKILL)  # prefork children left behind, if any
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.proc.wait(timeout=5)


def start_gunicorn(stack: contextlib.ExitStack) -> int:
    running = start_server("gunicorn", 2, "sync", 1)  # the whole portal (the WSGI road), as bin/serve runs it
    server, port = running.proc, running.port

    def stop() -> None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    stack.callback(stop)
    return port


# --- The fleet -----------------------------------------------------------------------------------


@dataclass
class Fleet:
    cluster: Any
    probes: list[tuple[int, str, str]]  # (node id, hostname, agent token): (a), with slurmd and a job
    burst: list[tuple[int, str]]  # (b): in slurm.conf without a slurmd
    cycle: tuple[int, str, str]  # (c): slurmd, BMC on the emulator, idle
    repair_policy: Any
    power_cycle_policy: Any


def names(args: argparse.Namespace) -> tuple[list[str], list[str], str]:
    return ([f"rb-a{i:03d}" for i in range(args.probes)], [f"rb-b{i:03d}" for i in range(args.burst)], "rb-c000")


def make_fleet(args: argparse.Namespace, slurm_conf: Path, emulator: Any) -> Fleet:
    """One Slurm cluster of ``--cluster-size`` production nodes, the safety settings and the policies."""
    from bmc.models import BmcEndpoint
    from fleet.choices import SchedulerKind
    from fleet.models import Cluster, HardwareProfile, Site
    from nodes.models import GPU, Node
    from remediation.choices import Domain, Rung, Urgency
    from remediation.models import BlastRadiusLimit, RemediationPolicy
    from telemetry.auth import TOKEN_PREFIX, hash_token
    from telemetry.models import AgentToken
    from validation.choices import Reentry, Stage
    from validation.models import Day1Spec, RevalidationPlan

    profile = HardwareProfile.objects.create(
        name="rbench-h100",
        gpu_model="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        hca_count=8,
        hca_rate_gbps=400,
        memory_gb=2048,
        firmware_baseline={},
    )
    Day1Spec.objects.create(hardware_profile=profile, soak_seconds=0)
    RevalidationPlan.objects.create(reentry=Reentry.REMEDIATING, stages=[Stage.RELIABILITY])
    site = Site.objects.create(slug="rbench", name="Remediation bench")
    cluster = Cluster.objects.create(
        site=site, name="rbench", scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint=str(slurm_conf)
    )
    probe_names, burst_names, cycle_name = names(args)
    measured = [*probe_names, *burst_names, cycle_name]
    others = [f"rb-f{i:04d}" for i in range(max(0, args.cluster_size - len(measured)))]
    nodes = Node.objects.bulk_create(
        Node(
            hostname=name,
            serial=f"RB{i:06d}",
            bmc_address=f"10.251.{i // 250}.{i % 250}",
            site=site,
            cluster=cluster,
            hardware_profile=profile,
            state="production",
        )
        for i, name in enumerate([*measured, *others])
    )
    by_name = {n.hostname: n for n in nodes}
    # The measured nodes' GPUs, as their agents report them: the XID names GPU 3, which is made suspect.
    GPU.objects.bulk_create(
        GPU(node=by_name[name], index=i, uuid=f"GPU-rb{n:05d}-{i}", serial=f"RBG{n:05d}{i}", model=profile.gpu_model)
        for n, name in enumerate(measured)
        for i in range(profile.gpu_count)
    )
    tokens = {name: TOKEN_PREFIX + uuid.uuid4().hex + uuid.uuid4().hex for name in [*probe_names, cycle_name]}
    AgentToken.objects.bulk_create(
        AgentToken(node=by_name[name], key_hash=hash_token(tok), prefix=tok[:12]) for name, tok in tokens.items()
    )
    BmcEndpoint.objects.create(
        node=by_name[cycle_name],
        address=emulator.url,
        username=emulator.username,
        password=emulator.password,
        system_id=emulator.systems[0]["uuid"],
    )
    BlastRadiusLimit.objects.create(
        domain=Domain.CLUSTER, max_share=1.0, max_count=100_000, max_drains_per_hour=100_000
    )
    repair = RemediationPolicy.objects.create(
        name="bench: cordon, then repair",
        priority=10,
        match_rule="xid",
        match_xid=XID,
        urgency=Urgency.NOW,
        first_rung=Rung.REPAIR,
    )
    cycle = RemediationPolicy.objects.create(
        name="bench: cordon, then power cycle",
        priority=20,
        enabled=False,
        match_rule="xid",
        match_xid=XID,
        urgency=Urgency.NOW,
        first_rung=Rung.POWER_CYCLE,
    )
    return Fleet(
        cluster,
        [(by_name[n].pk, n, tokens[n]) for n in probe_names],
        [(by_name[n].pk, n) for n in burst_names],
        (by_name[cycle_name].pk, cycle_name, tokens[cycle_name]),
        repair,
        cycle,
    )


def xid_body(hostname: str, when: datetime) -> bytes:
    from telemetry.testing import make_report

    report = make_report(hostname, collected_at=when, xid=XID, xid_gpu=3, seed=7)
    return json.dumps({"reports": [report]}, separators=(",", ":")).encode()


def post_report(port: int, token: str, body: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/api/agent/reports/",
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise SystemExit(f"POST /api/agent/reports/ answered {response.status}: {payload[:300]!r}")


# --- Watching Slurm and the workers --------------------------------------------------------------


def cordoned_by_us(adapter: Any, name: str) -> bool:
    info = adapter.show_node(SimpleNamespace(hostname=name))
    return bool(info.drain_flag and info.ours)


def cordoned_names(slurm_conf: Path) -> set[str]:
    """Every node Slurm lists with the DRAIN flag and a "nodewarden:" reason (one ``sinfo`` call:
    cheaper to run every 0.1 s than ``scontrol show node`` over all nodes, same slurmctld state)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-t", "drain", "-o", "%N|%E"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(slurm_conf)},
        timeout=30,
        check=True,
    ).stdout
    return {
        name
        for name, _, reason in (line.partition("|") for line in out.splitlines())
        if reason.startswith("nodewarden:")
    }


def wait_until(ready: Callable[[], bool], what: str, timeout: float, workers: list[Worker], poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for w in workers:
            if w.proc.poll() is not None:
                raise SystemExit(f"a Celery worker exited {w.proc.returncode} waiting for {what}:\n{w.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}; worker log:\n{workers[0].tail()}")
        time.sleep(poll)


def queues_empty() -> bool:
    """No message waiting in a queue and none taken but unacknowledged (acks_late) on the broker."""
    import redis

    from nodewarden.celery import QUEUE_NAMES

    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
    return sum(client.llen(q) for q in QUEUE_NAMES) + client.hlen("unacked") == 0


def wait_quiet(workers: list[Worker], timeout: float = 60) -> None:
    """Until the broker has been empty for 0.3 s (the previous phase's follow-ups are done)."""
    quiet_since: list[float] = []

    def quiet() -> bool:
        if not queues_empty():
            quiet_since.clear()
            return False
        quiet_since.append(time.monotonic())
        return quiet_since[-1] - quiet_since[0] >= 0.3

    wait_until(quiet, "the workers to finish the queued tasks", timeout, workers)


# --- Where the time and the CPU went ----------------------------------------------------------


def log_offsets(workers: list[Worker]) -> list[int]:
    return [w.log.stat().st_size for w in workers]


def task_times(workers: list[Worker], since: list[int], task: str) -> list[float]:
    """Seconds each ``task`` took in the workers (their "succeeded in" lines) since the offsets."""
    times = []
    for worker, offset in zip(workers, since, strict=True):
        with worker.log.open("rb") as log:
            log.seek(offset)
            for line in log.read().decode(errors="replace").splitlines():
                if f"Task {task}[" in line and " succeeded in " in line:
                    times.append(float(line.split(" succeeded in ")[1].split("s:")[0]))
    return times


def _cpu(pid: int, children: bool = True) -> float:
    """utime + stime (+ reaped children: a worker's scontrol/squeue calls) in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11 : 15 if children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def _pids(match: Callable[[list[str]], bool]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if match(stat):
                found.append(int(entry.name))
    return found


def cpu_snapshot(workers: list[Worker], slurm: Any) -> dict[str, float]:
    """CPU seconds used so far by each party of the bench (its processes only: others share this machine)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    groups = {w.proc.pid for w in workers}
    return {
        "Celery workers (with their scontrol/squeue children)": sum(
            _cpu(pid) for pid in _pids(lambda st: int(st[2]) in groups)
        ),
        # The postmaster's reaped-children time holds the backends that closed meanwhile.
        "PostgreSQL": _cpu(postmaster)
        + sum(_cpu(pid, children=False) for pid in _pids(lambda st: int(st[1]) == postmaster)),
        "slurmctld": _cpu(slurm.processes["slurmctld"].pid),
        "slurmd": sum(_cpu(p.pid) for name, p in slurm.processes.items() if name.startswith("slurmd-")),
        "munged": _cpu(slurm.processes["munged"].pid),
        "this process (watching Slurm)": sum(os.times()[:4]),
        MACHINE: _machine_busy(),
    }


MACHINE = "machine"
# Nodewarden's own parties in a burst: the CPU a node costs (the rest of the machine is other load).
OWN = ("Celery workers (with their scontrol/squeue children)", "PostgreSQL", "slurmctld", "munged")


def _machine_busy() -> float:
    """CPU seconds the whole machine was busy (every process, the kernel), from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


# --- Figures ------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


def first_event(node_id: int, transition: str, after: datetime | None = None) -> Any:
    from nodes.models import NodeEvent

    events = NodeEvent.objects.filter(node_id=node_id, transition=transition)
    if after is not None:
        events = events.filter(created__gte=after)
    return events.order_by("created", "id").first()


def xid_finding(node_id: int) -> Any:
    from health.models import Finding

    return Finding.objects.filter(node_id=node_id, rule="xid", xid=XID).order_by("created").first()


# --- (a) latency -------------------------------------------------------------------------------


def measure_latency(fleet: Fleet, port: int, adapter: Any, workers: list[Worker]) -> dict[str, Any]:
    """XID POST to DRAIN in Slurm, one node at a time; plus where the time went, from the database."""
    rows, offsets = [], log_offsets(workers)
    for node_id, name, token in fleet.probes:
        sent_wall = datetime.now(UTC)
        sent = time.perf_counter()
        post_report(port, token, xid_body(name, sent_wall))
        answered = time.perf_counter()
        deadline = sent + 30
        while not cordoned_by_us(adapter, name):
            if time.perf_counter() > deadline:
                raise SystemExit(
                    f"{name} was not cordoned in Slurm 30 s after its XID; worker log:\n{workers[0].tail()}"
                )
            time.sleep(POLL)
        seen = time.perf_counter()
        rows.append((node_id, sent_wall, answered - sent, seen - sent))
        time.sleep(0.1)
    wait_quiet(workers)
    ingest, decide, to_slurm = [], [], []
    for node_id, sent_wall, _, total in rows:
        finding, cordon = xid_finding(node_id), first_event(node_id, "cordon")
        ingest.append((finding.created - sent_wall).total_seconds())
        decide.append((cordon.created - finding.created).total_seconds())
        to_slurm.append(total - (cordon.created - sent_wall).total_seconds())
    return {
        "total": [r[3] for r in rows],
        "http": [r[2] for r in rows],
        "ingest": ingest,
        "decide": decide,
        "to_slurm": to_slurm,
        "task": task_times(workers, offsets, "remediation.tasks.consider_finding")
        + task_times(workers, offsets, "remediation.tasks.consider_findings"),
    }


# --- (b) throughput ----------------------------------------------------------------------------


def measure_burst(fleet: Fleet, slurm: Any, workers: list[Worker]) -> dict[str, Any]:
    """``--burst`` findings committed at one instant; until Slurm shows every one of them cordoned."""
    from telemetry.ingest import ingest_reports
    from telemetry.schema import decode_batch

    now = datetime.now(UTC)
    batches = [(node_id, decode_batch(xid_body(name, now))) for node_id, name in fleet.burst]
    wanted = {name for _, name in fleet.burst}
    offsets = log_offsets(workers)
    with transaction.atomic():
        for node_id, reports in batches:
            ingest_reports(node_id, reports, source="agent")
        cpu_before = cpu_snapshot(workers, slurm)
        started_wall, started = datetime.now(UTC), time.perf_counter()
    queued = time.perf_counter() - started  # COMMIT, then the consideration published on commit
    seen: dict[str, float] = {}

    def all_cordoned() -> bool:
        at = time.perf_counter() - started
        for name in cordoned_names(slurm.conf_path) & wanted:
            seen.setdefault(name, at)
        return len(seen) == len(wanted)

    wait_until(all_cordoned, f"{len(wanted)} nodes to be cordoned in Slurm", 120, workers, poll=0.1)
    cpu_after = cpu_snapshot(workers, slurm)
    wait_quiet(workers)
    cpu_quiet = cpu_snapshot(workers, slurm)  # and the rungs' hand-offs with their follow-ups
    cordons = [first_event(node_id, "cordon").created for node_id, _ in fleet.burst]
    per_node = [(c - started_wall).total_seconds() for c in cordons]
    return {
        "elapsed": max(seen.values()),
        "queued": queued,
        "first": min(seen.values()),
        "db_first": min(per_node),
        "db_last": max(per_node),
        "per_node": per_node,
        "cpu": {k: cpu_after[k] - cpu_before[k] for k in cpu_before},
        "cpu_quiet": {k: cpu_quiet[k] - cpu_before[k] for k in cpu_before},
        # One task a finding (before) or one for the commit's findings (consider_findings).
        "task": task_times(workers, offsets, "remediation.tasks.consider_finding")
        + task_times(workers, offsets, "remediation.tasks.consider_findings"),
        "followups": task_times(workers, offsets, "nodes.tasks.run_transition_followup")
        + task_times(workers, offsets, "nodes.tasks.run_transition_followups"),
        "rungs": task_times(workers, offsets, "remediation.tasks.start_rung")
        + task_times(workers, offsets, "remediation.tasks.start_rungs"),
    }


# --- (c) the full cycle ------------------------------------------------------------------------


def measure_cycle(fleet: Fleet, port: int, adapter: Any, workers: list[Worker]) -> dict[str, Any]:
    """One idle node from its XID to production again, with its Slurm drain lifted."""
    from nodes.choices import NodeState
    from nodes.models import Node

    fleet.repair_policy.enabled = False
    fleet.repair_policy.save(update_fields=["enabled"])
    fleet.power_cycle_policy.enabled = True
    fleet.power_cycle_policy.save(update_fields=["enabled"])
    node_id, name, token = fleet.cycle
    sent_wall, sent = datetime.now(UTC), time.perf_counter()
    post_report(port, token, xid_body(name, sent_wall))
    marks: dict[str, float] = {}

    def watch() -> bool:
        if "cordoned in Slurm" not in marks:
            if cordoned_by_us(adapter, name):
                marks["cordoned in Slurm"] = time.perf_counter() - sent
            return False
        if Node.objects.filter(pk=node_id, state=NodeState.PRODUCTION).exists() and not cordoned_by_us(adapter, name):
            marks["resumed in Slurm"] = time.perf_counter() - sent
            return True
        return False

    wait_until(watch, f"{name} to be back in production", 150, workers, poll=0.05)
    wait_quiet(workers)
    return {"sent_wall": sent_wall, "marks": marks, **cycle_split(node_id, sent_wall, marks["resumed in Slurm"])}


def cycle_split(node_id: int, sent_wall: datetime, total: float) -> dict[str, Any]:
    """Timeline and split of (c) from the rows the cycle wrote (see the module docstring)."""
    from nodes.choices import STAGE_KINDS
    from nodes.models import Run
    from remediation.models import Remediation, RemediationStep

    rem = Remediation.objects.get(node_id=node_id)
    step = RemediationStep.objects.get(remediation=rem)
    revalidate = first_event(node_id, "revalidate")
    stage_runs = list(Run.objects.filter(node_id=node_id, kind__in=STAGE_KINDS, started__gte=revalidate.created))
    checks = sum((r.finished - r.started).total_seconds() for r in stage_runs if r.finished)
    bmc = (step.finished - step.last_activity).total_seconds()

    def at(when: datetime | None) -> float:
        return (when - sent_wall).total_seconds() if when else float("nan")

    timeline = [
        ("finding committed", at(xid_finding(node_id).created)),
        ("cordon (Nodewarden)", at(first_event(node_id, "cordon").created)),
        ("start_remediation", at(first_event(node_id, "start_remediation").created)),
        ("power cycle taken up by a worker", at(step.last_activity)),
        ("power cycle done (BMC reports on)", at(step.finished)),
        ("revalidate", at(revalidate.created)),
        ("reliability stage opened", at(max((r.started for r in stage_runs), default=None))),
        ("release_to_production", at(first_event(node_id, "release_to_production").created)),
        ("remediation marked succeeded", at(rem.finished)),
    ]
    return {
        "timeline": timeline,
        "bmc": bmc,
        "checks": checks,
        "controller": total - bmc - checks,
        "stage_runs": len(stage_runs),
        "status": rem.status,
    }


# --- Safety check and report -------------------------------------------------------------------


def safety_summary(fleet: Fleet) -> str:
    from health.models import Finding
    from nodes.models import Node
    from remediation.models import CircuitBreaker, Remediation

    size = Node.objects.filter(cluster=fleet.cluster).count()
    hit = Finding.objects.filter(node__cluster=fleet.cluster, rule="xid").values("node_id").distinct().count()
    breakers = CircuitBreaker.objects.count()
    queued = Remediation.objects.filter(decisions__icontains="queued:").count()
    if breakers or queued:
        raise SystemExit(
            f"the safety rails interfered: {breakers} breaker(s) tripped, {queued} remediation(s) "
            "queued; the figures above do not measure what they claim"
        )
    return (
        f"circuit breaker armed, not tripped: {hit} of {size:,} nodes with findings ({hit / size:.0%}, "
        f"trips at 30%); 0 remediations queued (blast-radius limits raised for the bench)"
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def report(
    args: argparse.Namespace, lat: dict[str, Any], burst: dict[str, Any], cycle: dict[str, Any], safety: str
) -> None:
    total = lat["total"]
    print(f"\n(a) XID 79 POST -> DRAIN+nodewarden in scontrol, {len(total)} nodes one at a time, each under a job:")
    print(
        f"    p50 {ms(statistics.median(total))}  p99 {ms(pct(total, 0.99))}  max {ms(max(total))}  (target p99 < 1 s)"
    )
    print(
        f"    p50 parts: HTTP answer {ms(statistics.median(lat['http']))}; POST -> finding "
        f"{ms(statistics.median(lat['ingest']))}; finding -> cordon committed {ms(statistics.median(lat['decide']))}; "
        f"cordon committed -> seen drained in Slurm {ms(statistics.median(lat['to_slurm']))}"
    )
    print(
        f"    the consideration in the worker (the cordon; the rung starts in its own task): p50 {ms(statistics.median(lat['task']))}"
    )
    n = len(burst["per_node"])
    print(f"\n(b) {n} findings committed at once -> all {n} drained in Slurm (nodes without slurmd):")
    print(
        f"    {burst['elapsed']:.2f} s: {n / burst['elapsed']:.1f} cordons/s (target >= 50/s); first seen after "
        f"{ms(burst['first'])}; commit + queueing {ms(burst['queued'])}"
    )
    print(
        f"    cordon rows committed from {ms(burst['db_first'])} to {ms(burst['db_last'])}; "
        f"finding -> cordon p50 {ms(statistics.median(burst['per_node']))} p99 {ms(pct(burst['per_node'], 0.99))}"
    )
    print(
        f"    the consideration in the workers: p50 {ms(statistics.median(burst['task']))} "
        f"({len(burst['task'])} tasks, {args.workers * args.concurrency} at a time); then "
        f"{len(burst['followups'])} transition follow-ups, p50 {ms(statistics.median(burst['followups']))}; "
        f"{len(burst['rungs'])} tasks starting the rungs"
    )
    cpu = dict(burst["cpu"])
    busy = cpu.pop(MACHINE)
    cpu["everything else (Redis, gunicorn, kernel, other users of this machine)"] = busy - sum(cpu.values())
    print(
        f"    CPU seconds meanwhile: machine busy {busy:.1f} of {os.cpu_count() * burst['elapsed']:.1f} "
        f"({os.cpu_count()} cores x {burst['elapsed']:.1f} s): "
        + "; ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    )
    quiet = burst["cpu_quiet"]
    ours = sum(quiet[k] for k in OWN)
    print(
        "    CPU seconds until the workers were idle (the rungs' hand-offs too): "
        + "; ".join(f"{k} {quiet[k]:.1f}" for k in OWN)
        + f"; together {ours:.1f} s, {ours / n * 1000:.0f} ms a node"
    )
    marks = cycle["marks"]
    print(f"\n(c) full cycle, idle node, BMC power cycle (emulator delay {args.power_delay:g} s), re-validation:")
    for label, offset in sorted([*cycle["timeline"], *marks.items()], key=lambda lo: lo[1]):
        print(f"    {offset:7.2f} s  {label}")
    total_c = marks["resumed in Slurm"]
    own = 2 * args.power_delay
    print(f"    total {total_c:.2f} s (seed reference: under 120 s); remediation {cycle['status']}")
    print(
        f"    waiting on the BMC {cycle['bmc']:.2f} s (its own power delays {own:g} s, the rest the client's "
        f"{_poll_interval():g} s polling and HTTP); waiting on checks {cycle['checks']:.2f} s "
        f"({cycle['stage_runs']} stage runs); controller's own {cycle['controller']:.2f} s (target < 5 s)"
    )
    print(f"\n{safety}")


def _poll_interval() -> float:
    from django.conf import settings

    return float(settings.NODEWARDEN_BMC_POLL_INTERVAL)


# --- Main -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    from sandbox.emulators.bmc import RedfishEmulator
    from sandbox.emulators.slurm import SlurmCluster
    from schedulers.slurm import SlurmAdapter

    began = time.monotonic()
    call_command("migrate", verbosity=0)
    probe_names, burst_names, cycle_name = names(args)
    slurm = stack.enter_context(SlurmCluster([*probe_names, cycle_name], dead_nodes=burst_names))
    emulator = stack.enter_context(
        RedfishEmulator([{"name": cycle_name, "bios_version": "2.1.7"}], power_delay=args.power_delay)
    )
    fleet = make_fleet(args, slurm.conf_path, emulator)
    adapter = SlurmAdapter(fleet.cluster)
    for name in probe_names:
        slurm.submit(name, 600, f"train-{name}")
    connection.close()  # gunicorn and the workers open their own
    logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nodewarden-rbench-")))
    port = start_gunicorn(stack)
    workers = start_workers(stack, args.workers, args.concurrency, logdir)
    wait_until(
        lambda: len(slurm.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()) == len(probe_names),
        "every probe node's job to run",
        30,
        workers,
    )
    print(
        f"PostgreSQL {connection.cursor().connection.info.server_version}; {os.cpu_count()} CPUs; "
        f"{args.workers} Celery worker processes x {args.concurrency} prefork children (all four queues); "
        f"gunicorn 2 sync workers; Slurm: {len(probe_names) + 1} slurmd + {len(burst_names)} nodes without; "
        f"cluster of {args.cluster_size:,} nodes; set up in {time.monotonic() - began:.1f} s"
    )
    lat = measure_latency(fleet, port, adapter, workers)
    requeued = len(slurm.run("squeue", "-h", "-t", "PD", "-o", "%i").stdout.split())
    print(f"(a) done: {len(lat['total'])} cordons, {requeued} of {len(probe_names)} jobs requeued by the eviction")
    burst = measure_burst(fleet, slurm, workers)
    cycle = measure_cycle(fleet, port, adapter, workers)
    report(args, lat, burst, cycle, safety_summary(fleet))
    print(f"\nwhole run {time.monotonic() - began:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=50, help="nodes for (a), one XID each, one at a time")
    parser.add_argument("--burst", type=int, default=200, help="nodes for (b), all findings at once")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork children per worker")
    parser.add_argument("--power-delay", type=float, default=0.5, help="the emulated BMC's seconds per power change")
    parser.add_argument(
        "--cluster-size",
        type=int,
        default=1200,
        help="nodes in the one cluster (the breaker trips at 30%% of it with findings)",
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql" or not os.environ.get("CELERY_BROKER_URL", "").startswith("redis"):
        raise SystemExit("bench/remediation.py needs PostgreSQL and Redis: run it with bin/bench remediation")
    # SIGTERM (a killed CI job, kill PID) unwinds like Ctrl-C: every process below is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        run(args, stack)


if __name__ == "__main__":
    main()
