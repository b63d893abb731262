"""The fleet simulation: simulated time, injected faults, and the real system answering.

``Simulation(config).run()`` builds a fleet in the current database (one site, one cluster
with the "simulated" scheduler, ``config.nodes`` servers of one hardware profile, each with an
agent token and a BMC on a real Redfish emulator, sushy-tools), then moves a simulated clock
(``time_machine``: every ``now()`` in this process, the ORM's defaults included) through
``config.days`` days in ticks of ``config.tick_minutes``:

- faults arrive as a Poisson process per class at the published rates (``simulator.faults``),
  on a random healthy node, at their exact simulated instant: the node's virtual agent sends
  the signature through the real agent API, and a synchronous job running there crashes;
- every node's agent sends a full report on a staggered ``config.report_hours`` cycle (nodes
  out of production, and any node with news, at once); in between, a live agent's heartbeat is
  applied each tick as the one column the ingest would move (``NodeHealth.last_received_at``),
  in one statement for the fleet: 2,048 agents posting every 30 s through the request handler
  would take longer than the fleet time simulated. A silent host is not refreshed, so the real
  heartbeat rule finds it within a tick or two;
- the periodic work Celery beat would run (heartbeats, the remediation reconciler, Day 1
  stage polling) runs at each tick while any node needs it; Celery tasks run inline
  (``task_always_eager``), each at the simulated instant it was queued;
- the real rules, policies, remediation ladder and re-validation act; rungs reach the BMC
  emulators over HTTP; a reimaged node's agent rejoins through the real join endpoint with the
  join token of its user-data ``REINSTALL_MINUTES`` after the power cycle; the job's scheduler is ``sandbox.simulator.scheduler``; agents answer the
  re-validation's active checks, failing them while their GPU defect is not cured;
- a rung cures a fault when it reaches what the fault needs (``faults.rung_cures``);
  simulated technicians resolve repair tickets after ``repair_hours`` and RMA cases after
  ``rma_days`` through the repairs services, which sends the node back through Day 1.

The ledger (faults, the job's interruptions, state counts per hour, timings) goes to
``simulator.report``, which reads the rest (remediations, steps, findings, events) from
the database at the end.
"""

from __future__ import annotations

import heapq
import importlib.util
import itertools
import logging
import math
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import time_machine
from celery.signals import task_failure
from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.db.models.signals import post_save
from django.test import override_settings
from django.utils import timezone

from health.tasks import check_heartbeats
from nodes.choices import ACTIVE_KINDS, RunStatus
from nodes.models import Node, NodeEvent, Run
from nodewarden.celery import app
from remediation.choices import Status
from remediation.models import Remediation, RemediationStep
from remediation.tasks import reconcile
from repairs import services as repairs
from repairs.models import RepairTicket, RmaCase
from sandbox.emulators.bmc import RedfishEmulator
from sandbox.simulator import scheduler as simulated
from schedulers.tasks import follow_drains
from telemetry.models import AgentCommand, NodeHealth
from validation.tasks import advance_day1_stages

from . import agents as A
from . import faults as F
from .workload import RUNNING, SyncJob

log = logging.getLogger(__name__)
SITE, CLUSTER, PROFILE = "sim", "sim-cluster", "sim-h100-8"
MANUAL_AFTER_REPEATS = 2  # crashes of the restarted job on the same undetected defect before a person steps in
REINSTALL_MINUTES = 20  # PXE boot, installer, first boot: a reimaged node's agent joins this long after the power cycle
# Nodes Nodewarden is working on: while any exists, the periodic tasks run every tick.
POLL_STATES = (
    "drain_pending",
    "draining",
    "remediating",
    "firmware_update",
    "inventory_check",
    "burn_in",
    "fabric_check",
    "reliability_assessment",
)


@dataclass
class SimConfig:
    nodes: int = 256
    days: float = 7.0
    seed: int = 1
    policy: str = "default"
    rate_scale: float = 1.0  # x the Llama 3 rates (e.g. 1.71 for Meta RSC-1's 6.50 per 1000 node-days)
    noise_scale: float = 1.0
    report_hours: float = 168.0  # full routine report cycle; news (faults, cures, checks) is sent at once
    heartbeat_minutes: float = 30.0
    busy_report_minutes: float = 15.0  # nodes Nodewarden works on send a full report this often  # agents' liveness applied this often; missing after 1.5 of these
    tick_minutes: float = 5.0  # while Nodewarden works on a node; quiet spells jump to the next event
    checkpoint_minutes: float = 20.0
    restart_minutes: float = 10.0
    job_nodes: int | None = None  # default: all but 3% hot spares
    repair_hours: tuple[float, float] = (4.0, 24.0)
    rma_days: tuple[float, float] = (3.0, 5.0)
    soak_minutes: float = 30.0
    nodes_per_emulator: int = 128
    speedup: float = 0.0  # at most this many simulated seconds per wall second; 0: as fast as it goes
    start: datetime = datetime(2026, 1, 5, tzinfo=UTC)
    audit_hours: float = 1.0  # the fleet auditor runs this often (simulated) and at the end; 0: never
    audit_bmc_reads: int = 2  # BMC power reads per audit (~13 ms each over HTTP: most of an audit's cost)
    # GPU-level remediation (the reset rung and GPU fencing): None leaves the settings as they are;
    # True/False sets NODEWARDEN_GPU_RESET and NODEWARDEN_GPU_FENCING for the run (the two arms of
    # --compare-gpu-rungs, on the same faults).
    gpu_rungs: bool | None = None
    command_poll_seconds: float = 30.0  # the agent polls for commands this often (a command waits half that)

    @property
    def job_size(self) -> int:
        return self.job_nodes if self.job_nodes is not None else self.nodes - max(1, math.ceil(self.nodes * 0.03))


@dataclass
class Ledger:
    faults: list[A.SimFault] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # faults that fell on a node already down
    states: list[tuple[datetime, dict[str, int]]] = field(default_factory=list)
    cures: list[tuple[str, str, str, datetime]] = field(default_factory=list)  # host, fault key, by, when
    evictions: int = 0
    manual: list[tuple[str, str, datetime]] = field(
        default_factory=list
    )  # host, fault key, when an operator stepped in
    repairs_done: int = 0
    rmas_done: int = 0
    task_errors: list[str] = field(default_factory=list)
    phase_seconds: Counter[str] = field(default_factory=Counter)
    ticks: int = 0
    busy: Counter[str] = field(default_factory=Counter)  # ticks by what kept the loop polling
    audits: int = 0  # fleet auditor runs
    breaches: Counter[str] = field(default_factory=Counter)  # breaches seen, by invariant, summed over runs
    breached: dict[tuple[str, str], tuple[datetime, dict[str, Any]]] = field(default_factory=dict)  # (host, inv): first
    breaches_at_end: dict[str, int] = field(default_factory=dict)
    # Every fault drawn (at, key, host, cure, gpu, xid), those that fell on a node already down included:
    # drawn from a generator of their own, so two runs of one seed draw the same list whatever they did.
    drawn: list[tuple[datetime, str, str, str, int, int | None]] = field(default_factory=list)
    commands: Counter[str] = field(default_factory=Counter)  # agent commands answered, "verb outcome"
    resets: list[tuple[str, int, str, datetime]] = field(default_factory=list)  # host, gpu, outcome, when
    fences: int = 0  # GPUs fenced (scheduler calls, each GPU once per call)
    unfences: int = 0
    fenced_gpus: list[int] = field(default_factory=list)  # fenced GPUs on nodes in production, per state sample


class Simulation:
    def __init__(self, config: SimConfig, *, progress: Any = None) -> None:
        self.config = config
        self.progress = progress  # called with a line of text once per simulated day
        self.rng = random.Random(config.seed)
        # Faults only: what the rest draws (checks, technicians) depends on what the system did, and
        # must not move the next fault (the arms of a comparison meet the same faults).
        self.fault_rng = random.Random(config.seed)
        self.ledger = Ledger()
        self.job = SyncJob(
            config.job_size, timedelta(minutes=config.checkpoint_minutes), timedelta(minutes=config.restart_minutes)
        )
        self.cordons: dict[str, str] = {}
        self.fenced: dict[str, set[int]] = {}  # host -> GPU indices the scheduler hands out no more
        self.nodes: dict[str, A.VirtualNode] = {}
        self.api = A.AgentApi()
        self.events: list[tuple[datetime, int, str, Any]] = []
        self.routine: deque[tuple[datetime, str]] = deque()
        self._order = itertools.count()
        self.emulators: list[Any] = []
        self.traveller: Any = None
        self.cluster_id = 0
        self.technician: Any = None
        self.operator: Any = None  # the simulated operator (an Actor), made when first needed
        self.due: dict[tuple[str, int], datetime] = {}
        self._drawn: Counter[tuple[str, str]] = Counter()  # tickets and RMA cases drawn per (kind, host)
        self._news: set[str] = set()
        self.by_id: dict[int, A.VirtualNode] = {}
        self.end = config.start + timedelta(days=config.days)
        self._perf_start = time.perf_counter()

    # --- the World protocol of sandbox.simulator.scheduler ------------------------------------------
    def job_runs_on(self, host: str) -> bool:
        return self.job.state == RUNNING and host in self.job.members

    def evict(self, host: str, reason: str) -> None:
        if self.job.interrupt(timezone.now(), host, "evicted") is not None:
            self.ledger.evictions += 1

    def fence(self, host: str, indices: list[int]) -> bool:
        """The scheduler hands these GPUs out no more; the job keeps the node's other GPUs (the
        lost capacity shows as fenced GPU-hours in the report)."""
        fenced = self.fenced.setdefault(host, set())
        self.ledger.fences += len(set(indices) - fenced)
        fenced.update(indices)
        return True

    def unfence(self, host: str, indices: list[int]) -> bool:
        fenced = self.fenced.get(host, set())
        self.ledger.unfences += len(fenced & set(indices))
        fenced.difference_update(indices)
        if not fenced:
            self.fenced.pop(host, None)
        return True

    # --- running ---------------------------------------------------------------------------------
    def run(self) -> Ledger:
        travel = time_machine.travel(self.config.start, tick=True)
        self.traveller = travel.start()
        eager = (settings.CELERY_TASK_ALWAYS_EAGER, settings.CELERY_TASK_EAGER_PROPAGATES)
        self._eager(True, False)
        poll = settings.NODEWARDEN_BMC_POLL_INTERVAL
        settings.NODEWARDEN_BMC_POLL_INTERVAL = 0.02  # the emulators apply power at once: no need to wait 2 s
        # The auditor asks the scheduler about NODEWARDEN_AUDIT_SCHEDULER_NODES nodes a run (500: all
        # of a small fleet, 2,048 nodes every 4 h) and reads a few BMCs a run, round the fleet.
        audit = {"NODEWARDEN_AUDIT_BMC_READS": settings.NODEWARDEN_AUDIT_BMC_READS}
        settings.NODEWARDEN_AUDIT_BMC_READS = self.config.audit_bmc_reads

        def failed(sender: Any = None, exception: Any = None, **kwargs: Any) -> None:
            self._task_error(f"{getattr(sender, 'name', sender)}: {exception!r}")

        task_failure.connect(failed, weak=False)
        post_save.connect(self._on_event_saved, sender=NodeEvent, weak=False)
        post_save.connect(self._on_command_saved, sender=AgentCommand, weak=False)
        gpu_rungs = (
            override_settings(NODEWARDEN_GPU_RESET=self.config.gpu_rungs, NODEWARDEN_GPU_FENCING=self.config.gpu_rungs)
            if self.config.gpu_rungs is not None
            else None
        )
        if gpu_rungs is not None:
            gpu_rungs.enable()
        try:
            self._start_emulators()
            self._build_fleet()
            simulated.attach(self.cluster_id, self)
            self._plan_faults()
            self._loop()
        finally:
            task_failure.disconnect(failed)
            post_save.disconnect(self._on_event_saved, sender=NodeEvent)
            post_save.disconnect(self._on_command_saved, sender=AgentCommand)
            if gpu_rungs is not None:
                gpu_rungs.disable()
            simulated.detach(self.cluster_id)
            for emulator in self.emulators:
                emulator.stop()
            self._eager(*eager)
            settings.NODEWARDEN_BMC_POLL_INTERVAL = poll
            for name, value in audit.items():
                setattr(settings, name, value)
            travel.stop()
        return self.ledger

    @staticmethod
    def _eager(always: bool, propagates: bool) -> None:
        settings.CELERY_TASK_ALWAYS_EAGER = always
        settings.CELERY_TASK_EAGER_PROPAGATES = propagates
        app.conf.task_always_eager = always
        app.conf.task_eager_propagates = propagates

    def _move_to(self, at: datetime) -> None:
        if at > timezone.now():
            self.traveller.move_to(at)

    def _start_emulators(self) -> None:
        if importlib.util.find_spec("sushy_tools") is None:
            raise RuntimeError("The simulator's BMCs run on sushy-tools' Redfish emulator: pip install -e '.[demo]'")

        per = self.config.nodes_per_emulator
        for first in range(0, self.config.nodes, per):
            systems = [
                {"name": self.hostname(i), "bios_version": "2.1.7"}
                for i in range(first, min(first + per, self.config.nodes))
            ]
            emulator = RedfishEmulator(systems)
            emulator.start()
            self.emulators.append(emulator)

    def hostname(self, index: int) -> str:
        return f"sim-{index + 1:05d}"

    def _build_fleet(self) -> None:
        from .fleet import build_fleet

        started = time.perf_counter()
        self.cluster_id, tokens, self.technician = build_fleet(self.config, self.emulators, self.hostname)
        for index, (node_id, hostname, token) in enumerate(tokens):
            self.nodes[hostname] = A.VirtualNode(
                node_id, hostname, token, index, booted_at=self.config.start - timedelta(days=30)
            )
            self.by_id[node_id] = self.nodes[hostname]
        self.ledger.phase_seconds["build fleet"] += time.perf_counter() - started
        started = time.perf_counter()
        for node in self.nodes.values():  # every agent's first report, as it starts
            self._report(node, self.config.start)
        self.ledger.phase_seconds["first reports"] += time.perf_counter() - started

    # --- faults ----------------------------------------------------------------------------------
    def _plan_faults(self) -> None:
        """Arrival times of every fault and noise signal, drawn up front (same seed, same arrivals)."""
        days, nodes = self.config.days, self.config.nodes
        for kinds, scale in ((F.FAULTS, self.config.rate_scale), (F.NOISE, self.config.noise_scale)):
            for fault in kinds:
                rate = fault.per_node_day * nodes * scale  # per day, fleet-wide
                if rate <= 0:
                    continue
                at = 0.0
                while True:
                    at += self.fault_rng.expovariate(rate)
                    if at >= days:
                        break
                    self._push(self.config.start + timedelta(days=at), "fault", fault.key)

    def _push(self, at: datetime, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (at, next(self._order), kind, payload))

    def plant(
        self,
        after: timedelta,
        key: str,
        host: str,
        *,
        cure: str | None = None,
        gpu: int = 0,
        xid: int | None = None,
        interrupts: bool | None = None,
    ) -> None:
        """Schedule one fault of class ``key`` on ``host`` at ``after`` into the run (scenarios, tests).
        ``interrupts=False``: the fault has not crashed the job (yet), e.g. a GPU running hot with its
        clocks slowed; None: as its class says."""
        self._push(self.config.start + after, "planted", (key, host, cure, gpu, xid, interrupts))

    def _inject(self, key: str, now: datetime, planted: tuple[Any, ...] | None = None) -> None:
        fault = F.BY_KEY[key]
        if planted is None:
            rng = self.fault_rng
            node = self.nodes[self.hostname(rng.randrange(self.config.nodes))]
            cure, gpu, hca, xid = fault.draw_cure(rng), rng.randrange(8), rng.randrange(8), fault.draw_xid(rng)
        else:
            _, host, cure, gpu, xid, _interrupts = planted  # interrupts: read below
            node = self.nodes[host]
            cure = fault.cures[0][0] if cure is None else cure
            hca, xid = gpu, fault.xids[0] if xid is None and fault.xids else xid
        self.ledger.drawn.append((now, key, node.hostname, cure, gpu, xid))
        if node.fault is not None or (fault.noise and key in node.noise):
            self.ledger.skipped[key] += 1
            return
        signal = A.SimFault(len(self.ledger.faults) + 1, fault, node.hostname, now, cure, gpu=gpu, hca=hca, xid=xid)
        self.ledger.faults.append(signal)
        A.on_fault(node, signal)
        if fault.noise:
            lasts = {"link_flap": timedelta(minutes=2), "heat_wave": timedelta(minutes=40)}.get(key, timedelta(0))
            node.noise[key] = (signal, now + lasts)
            signal.cured_at, signal.cured_by = now + lasts, "went away"
            if lasts:
                self._push(now + lasts, "report", node.hostname)
        elif fault.signature != F.NONE or signal.cure:
            node.fault = signal
        if fault.interrupts_job if planted is None or planted[5] is None else planted[5]:
            self.job.interrupt(now, node.hostname, key)
        self._report(node, now)

    # --- the loop ----------------------------------------------------------------------------------
    def _loop(self) -> None:
        tick = timedelta(minutes=self.config.tick_minutes)
        beat = timedelta(minutes=self.config.heartbeat_minutes)
        cycle = timedelta(hours=self.config.report_hours)
        n = len(self.nodes)
        # Full reports staggered over the cycle: a queue of their own, always in time order (one
        # cycle for all), which does not cut quiet spells short as faults do.
        self.routine = deque(
            (self.config.start + cycle * (node.index + 1) / n, node.hostname) for node in self.nodes.values()
        )
        now, next_beat, next_sample, busy = self.config.start, self.config.start + beat, self.config.start, True
        audit_every = timedelta(hours=self.config.audit_hours)
        next_audit = self.config.start + audit_every if self.config.audit_hours > 0 else self.end + tick
        next_busy_report = next_technicians = now
        while now < self.end:
            quiet_until = min([next_beat, self.end, *([self.events[0][0]] if self.events else []), *self.due.values()])
            now = min(now + tick, self.end) if busy else max(min(quiet_until, self.end), now + tick)
            self._timed("events", self._run_events, now)
            self._move_to(now)
            beat_now = now >= next_beat
            if beat_now:
                self._timed("heartbeats", self._heartbeats, now)
                next_beat = now + beat
            if now >= next_busy_report:
                self._timed("reports of nodes being worked on", self._busy_reports, now)
                next_busy_report = now + timedelta(minutes=self.config.busy_report_minutes)
            self._timed("periodic tasks", self._periodic, heartbeats=beat_now)
            self._timed("reinstalls", self._reinstalls, now)
            self._timed("reports after restarts", self._send_news, now)
            self._timed("active checks", self._answer_checks, now)
            self._timed("reports after restarts", self._send_news, now)
            if now >= next_technicians:
                self._timed("technicians", self._technicians, now)
                next_technicians = now + timedelta(minutes=15)
            self._timed("job", self._advance_job, now)
            busy = self._timed("poll", self._needs_polling)
            self.ledger.busy[busy or "nothing"] += 1
            while next_sample <= now:
                self._timed("state samples", self._sample, next_sample)
                next_sample += timedelta(hours=1)
                if self.progress is not None and (next_sample - self.config.start) % timedelta(days=1) == timedelta(0):
                    self._say_progress(next_sample)
            if now >= next_audit:  # once per tick however many hours a quiet spell jumped: nothing moved
                self._timed("fleet auditor", self._audit, now)
                next_audit = now + audit_every
            self.ledger.ticks += 1
            if self.config.speedup > 0:
                self._throttle(now)
        self.job.finish(self.end)
        self._sample(self.end)
        if self.config.audit_hours > 0:
            self.ledger.breaches_at_end = self._timed("fleet auditor", self._audit, self.end)

    def _say_progress(self, now: datetime) -> None:
        counts = self.ledger.states[-1][1] if self.ledger.states else {}
        self.progress(
            f"day {(now - self.config.start).days:>3}/{self.config.days:g}: "
            f"{len(self.ledger.faults):>4} faults, {len(self.job.interruptions):>4} job interruptions, "
            f"{counts.get('production', 0):>5} nodes in production, "
            f"{time.perf_counter() - self._perf_start:6.0f} s"
        )

    def _throttle(self, now: datetime) -> None:
        """Hold the simulated clock to ``speedup`` x wall time (to watch a run in the portal)."""
        # perf_counter is real time (time_machine moves time.time and time.monotonic, not perf_counter)
        ahead = (now - self.config.start).total_seconds() / self.config.speedup - (
            time.perf_counter() - self._perf_start
        )
        if ahead > 0:
            time.sleep(min(ahead, 60))

    def _timed(self, phase: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.ledger.phase_seconds[phase] += time.perf_counter() - started

    def _run_events(self, until: datetime) -> None:
        cycle = timedelta(hours=self.config.report_hours)
        while True:
            if (
                self.routine
                and self.routine[0][0] <= until
                and (not self.events or self.routine[0][0] <= self.events[0][0])
            ):
                at, hostname = self.routine.popleft()
                self._move_to(at)
                self._report(self.nodes[hostname], at)
                self.routine.append((at + cycle, hostname))
                continue
            if not self.events or self.events[0][0] > until:
                return
            at, _, kind, payload = heapq.heappop(self.events)
            self._move_to(at)
            if kind == "fault":
                self._inject(payload, at)
            elif kind == "planted":
                self._inject(payload[0], at, payload)
            elif kind == "report":
                node = self.nodes[payload]
                node.noise = {k: v for k, v in node.noise.items() if v[1] > at}
                self._report(node, at)
            elif kind == "poll commands":
                self._take_commands(self.nodes[payload], at)
            elif kind == "command done":
                self._answer_command(*payload, at)

    def _busy(self, host: str) -> bool:
        return self.job_runs_on(host)

    def _report(self, node: A.VirtualNode, now: datetime) -> None:
        body = A.report(node, now, busy=self._busy(node.hostname), rng=self.rng)
        if body is not None:
            self.api.send(node, [body])

    def _busy_reports(self, now: datetime) -> None:
        """Nodes Nodewarden works on send full reports more often (their agents report every 30 s)."""
        out = Node.objects.filter(cluster_id=self.cluster_id, state__in=POLL_STATES).values_list("hostname", flat=True)
        for hostname in out:
            self._report(self.nodes[hostname], now)

    def _needs_polling(self) -> str:
        """What Nodewarden is working on that the periodic tasks move on ("" for nothing). A drain
        that waits for the job to end is not (the job ends at its next interruption); nor is a
        remediation waiting for a person's approval or a technician."""
        for hostname, state in Node.objects.filter(cluster_id=self.cluster_id, state__in=POLL_STATES).values_list(
            "hostname", "state"
        ):
            if state not in ("drain_pending", "draining") or not self.job_runs_on(hostname):
                return f"a node in {state}"
        if Run.objects.filter(node__cluster_id=self.cluster_id, status=RunStatus.QUEUED).exists():
            return "a queued check"
        status = (
            Remediation.objects.filter(
                node__cluster_id=self.cluster_id, status__in=(Status.QUEUED, Status.RUNNING, Status.VALIDATING)
            )
            .values_list("status", flat=True)
            .first()
        )
        return f"a remediation {status}" if status else ""

    def _heartbeats(self, now: datetime) -> None:
        silent = [n.node_id for n in self.nodes.values() if n.silent]
        NodeHealth.objects.filter(node__cluster_id=self.cluster_id).exclude(node_id__in=silent).update(
            last_received_at=now
        )

    def _periodic(self, *, heartbeats: bool) -> None:
        """What Celery beat runs every minute or so, run at this tick; the heartbeat check right
        after the agents' heartbeats were applied (in between, nothing can have gone missing)."""
        for task in ((check_heartbeats,) if heartbeats else ()) + (reconcile, follow_drains, advance_day1_stages):
            started = time.perf_counter()
            try:
                task.apply()
            except Exception as exc:  # a bug in the system under test: counted and reported, never hidden
                self._task_error(f"{task.name}: {exc!r}")
            self.ledger.phase_seconds[f"  of which {task.name}"] += time.perf_counter() - started

    def _task_error(self, what: str) -> None:
        log.error("simulation task error: %s", what)
        if len(self.ledger.task_errors) < 100:
            self.ledger.task_errors.append(what)

    def _answer_checks(self, now: datetime) -> None:

        hosts = set(
            Run.objects.filter(
                node__cluster_id=self.cluster_id, kind__in=ACTIVE_KINDS, status=RunStatus.QUEUED
            ).values_list("node__hostname", flat=True)
        )
        for hostname in sorted(hosts):
            node = self.nodes[hostname]
            if node.silent or node.booting(now):
                continue  # a dead host runs nothing (the stage times out); a restarting one not yet
            self._report(node, now)  # a fresh report first: checks are only handed to an idle node
            for check in self.api.claim_checks(node):
                self.api.post_result(node, check["id"], A.check_result(node, check["kind"], now, self.rng))

    def _on_event_saved(self, sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
        """A rung acted (the node is sent to re-validation): the host restarted, and the fault is cured
        if the rung reaches far enough: at once, as the hardware would, before any check is asked for."""
        remediation_id = (instance.details or {}).get("remediation") if instance.transition == "revalidate" else None
        node = self.by_id.get(instance.node_id)
        if not created or remediation_id is None or node is None:
            return
        rung = (
            RemediationStep.objects.filter(remediation_id=remediation_id, acted_at__isnull=False)
            .order_by("-acted_at")
            .values_list("rung", flat=True)
            .first()
        )
        if rung is None:
            return
        if rung == F.RESET:
            return  # a GPU reset restarts no host; the agent's answer to reset_gpu already cured what it cures
        node.booted_at = instance.created
        if rung in A.RESTART_MINUTES:
            node.up_at = instance.created + timedelta(minutes=A.RESTART_MINUTES[rung])
        if node.fault is not None and F.rung_cures(rung, node.fault.cure):
            self._cure(node, f"rung {rung}", instance.created)
        self._news.add(node.hostname)

    def _reinstalls(self, now: datetime) -> None:
        """A node PXE-booted by a reimage reinstalls for REINSTALL_MINUTES, then cloud-init runs the agent's
        join with the join token of its user-data (the real join endpoint): the reimage step passes and
        the virtual agent goes on with the new agent token. A dead host whose fault a reimage does not
        cure never comes back (its step times out, the ladder climbs)."""
        from provisioning.cloudinit import current_join_token
        from provisioning.models import BootConfig

        waiting = RemediationStep.objects.filter(
            remediation__node__cluster_id=self.cluster_id,
            rung="reimage",
            status="running",
            boot_generation__isnull=False,
        ).values_list("remediation__node__hostname", "last_activity", "started")
        for hostname, took_up, started in waiting:
            node = self.nodes[hostname]
            if now < (took_up or started) + timedelta(minutes=REINSTALL_MINUTES):
                continue
            if node.silent and not F.rung_cures("reimage", node.fault.cure):
                continue
            boot = BootConfig.objects.get(node_id=node.node_id)
            token = current_join_token(boot)
            answer = self.api.join(node, token.clear_token() if token else "")
            if answer is not None:
                node.token = answer["node_token"]

    def _send_news(self, now: datetime) -> None:
        """Agents of hosts that just restarted report at once (a booted agent's first report)."""
        news, self._news = sorted(self._news), set()
        for hostname in news:
            self._report(self.nodes[hostname], now)

    def _cure(self, node: A.VirtualNode, by: str, now: datetime) -> None:
        fault = node.fault
        if fault is None:
            return
        fault.cured_at, fault.cured_by = now, by
        self.ledger.cures.append((node.hostname, fault.fault.key, by, now))
        node.fault = None

    def _technicians(self, now: datetime) -> None:
        """Simulated technicians and vendors: tickets resolved after repair_hours, RMA cases after rma_days."""
        tickets = RepairTicket.objects.filter(node__cluster_id=self.cluster_id, state__in=("open", "in_progress"))
        for ticket_id, hostname in tickets.values_list("pk", "node__hostname"):
            if ("ticket", ticket_id) not in self.due:
                hours = self._draw("ticket", hostname).uniform(*self.config.repair_hours)
                self.due[("ticket", ticket_id)] = now + timedelta(hours=hours)
            due = self.due[("ticket", ticket_id)]
            if now >= due:
                del self.due[("ticket", ticket_id)]
                self._by_technician(partial(self._repair, ticket_id), self.nodes[hostname], now, "technician")
                self.ledger.repairs_done += 1
        cases = RmaCase.objects.filter(node__cluster_id=self.cluster_id, state__in=("opened", "shipped", "returned"))
        for case_id, hostname, status in cases.values_list("pk", "node__hostname", "state"):
            if ("rma", case_id) not in self.due:
                days = self._draw("rma", hostname).uniform(*self.config.rma_days)
                self.due[("rma", case_id)] = now + timedelta(days=days)
            due = self.due[("rma", case_id)]
            if now >= due:
                del self.due[("rma", case_id)]
                self._by_technician(partial(self._close_rma, case_id, status), self.nodes[hostname], now, "RMA")
                self.ledger.rmas_done += 1

    def _draw(self, kind: str, host: str) -> random.Random:
        """A generator for the n-th ticket (or RMA case) of this host: the same repair time for the same
        fault in both arms of a comparison, whatever else each arm drew (checks, reports) before it."""
        n = self._drawn[(kind, host)]
        self._drawn[(kind, host)] += 1
        return random.Random(f"{self.config.seed}:{kind}:{host}:{n}")

    def _repair(self, ticket_id: int) -> None:
        repairs.start_repair(ticket_id, actor=self.technician, reason="Simulated technician on site")
        repairs.resolve_repair(ticket_id, actor=self.technician, reason="Simulated repair done")

    def _close_rma(self, case_id: int, status: str) -> None:
        who = self.technician
        if status == "opened":
            repairs.ship_rma(case_id, actor=who, reason="Simulated: part shipped to the vendor")
        if status in ("opened", "shipped"):
            repairs.receive_rma(
                case_id,
                replacement_serial=f"SIM-{case_id:06d}",
                outcome="replaced",
                actor=who,
                reason="Simulated: replacement received",
            )
        repairs.close_rma(case_id, actor=who, reason="Simulated: replacement installed")

    def _by_technician(self, work: Any, node: A.VirtualNode, now: datetime, by: str) -> None:
        try:
            with transaction.atomic():
                work()
        except Exception as exc:
            self._task_error(f"{by} on {node.hostname}: {exc!r}")
            return
        node.booted_at = now
        self._cure(node, by, now)
        self._report(node, now)

    def _advance_job(self, now: datetime) -> None:
        usable = (
            set()
            if self.job.state == RUNNING
            else {h for h, n in self.nodes.items() if h not in self.cordons and not n.silent}
        )
        was = self.job.state
        self.job.advance(now, usable)
        if was != RUNNING and self.job.state == RUNNING:
            # A member that still carries a defect crashes the job again (the scheduler cannot know).
            for host in sorted(self.job.members):
                fault = self.nodes[host].fault
                if fault is not None and fault.fault.signature != F.NONE and not self._fenced_off(host, fault):
                    self.job.interrupt(now, host, fault.fault.key)
                    fault.repeats += 1
                    if fault.repeats >= MANUAL_AFTER_REPEATS:
                        self._operator_steps_in(host, fault, now)
                    break

    def _fenced_off(self, host: str, fault: A.SimFault) -> bool:
        """The fault is on a GPU the scheduler no longer hands out: the job runs on the others."""
        return fault.fault.signature in A.GPU_FAIL_KINDS and fault.gpu in self.fenced.get(host, ())

    def _operator_steps_in(self, host: str, fault: A.SimFault, now: datetime) -> None:
        """The job keeps dying on a node nobody took out: an operator takes it out by hand (a manual
        intervention, as the Llama 3 team counted 3 of) through Nodewarden, as a person would: "Cordon
        now" (the scheduler is told by the cordon's reaction) and a technician's ticket, which the
        simulated technicians then fix like any other. Never a cordon in the scheduler behind
        Nodewarden's back: what Nodewarden says of the node stays what the scheduler says."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from nodes import services as node_services
        from nodes.roles import OPERATORS
        from nodes.services import Actor

        self.ledger.manual.append((host, fault.fault.key, now))
        if self.operator is None:
            user, _ = get_user_model().objects.get_or_create(username="sim-operator")
            user.groups.add(Group.objects.get(name=OPERATORS))
            self.operator = Actor(user=user)
        node_id, why = self.nodes[host].node_id, f"the job keeps dying on it ({fault.repeats} restarts)"
        try:
            with transaction.atomic():
                node_services.cordon(node_id, actor=self.operator, reason=f"Simulated operator: {why}")
                repairs.open_repair_ticket(
                    node_id,
                    component="node",
                    what=f"Nothing flagged it, but {why}.",
                    actor=self.operator,
                    reason=f"Simulated operator: {why}",
                )
        except Exception as exc:  # a bug in the system under test: counted and reported, never hidden
            self._task_error(f"operator on {host}: {exc!r}")

    def _audit(self, now: datetime) -> dict[str, int]:
        """The fleet auditor, as its beat task runs it: the real checks, findings and AuditRun; the
        breaches go to the ledger by invariant (each (host, invariant) kept once, first seen)."""
        from audit.services import run_audit

        try:
            run = run_audit(source="simulator", now=now)
        except Exception as exc:  # a bug in the system under test: counted and reported, never hidden
            self._task_error(f"audit: {exc!r}")
            return {}
        self.ledger.audits += 1
        if run.error:
            self._task_error(f"audit: {run.error}")
        by_invariant = run.breaches_by_invariant()
        self.ledger.breaches.update(by_invariant)
        for breach in run.breaches:
            self.ledger.breached.setdefault((breach["hostname"], breach["invariant"]), (now, breach))
        return {k: v for k, v in by_invariant.items() if v}

    def _sample(self, now: datetime) -> None:
        counts = dict(
            Node.objects.filter(cluster_id=self.cluster_id)
            .values_list("state")
            .annotate(n=Count("id"))
            .values_list("state", "n")
        )
        self.ledger.states.append((now, counts))
        fenced = (
            Node.objects.filter(cluster_id=self.cluster_id, hostname__in=list(self.fenced), state="production")
            .values_list("hostname", flat=True)
            .iterator()
            if self.fenced
            else ()
        )
        self.ledger.fenced_gpus.append(sum(len(self.fenced[h]) for h in fenced))

    # --- agent commands ----------------------------------------------------------------------------------
    def _on_command_saved(self, sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
        """A command was issued for a node: its agent takes it at its next poll (half a poll interval on)."""
        node = self.by_id.get(instance.node_id)
        if created and node is not None:
            self._push(
                instance.created + timedelta(seconds=self.config.command_poll_seconds / 2),
                "poll commands",
                node.hostname,
            )

    def _take_commands(self, node: A.VirtualNode, now: datetime) -> None:
        """The agent's poll through the agent API; each command's outcome is posted when it is done."""
        if node.silent:
            return  # a dead host polls nothing: its commands expire
        for command in self.api.take_commands(node):
            took, outcome, summary = A.command_outcome(node, command, busy=self._gpu_busy(node.hostname, command))
            self._push(now + took, "command done", (node.hostname, command, outcome, summary))

    def _gpu_busy(self, host: str, command: dict[str, Any]) -> bool:
        """A reset needs the GPU idle: the job's processes hold it while the job runs on the node, unless
        the GPU is fenced (the scheduler placed nothing on it; the job crashed off it)."""
        gpu = (command.get("args") or {}).get("gpu")
        return self.job_runs_on(host) and gpu not in self.fenced.get(host, ())

    def _answer_command(self, host: str, command: dict[str, Any], outcome: str, summary: str, now: datetime) -> None:
        """The command is done: its effect on the simulated hardware first (a reset cures what a reset
        cures; a reboot restarts the host), then the agent posts the outcome."""
        node, verb = self.nodes[host], command["verb"]
        self.ledger.commands[f"{verb} {outcome}"] += 1
        if verb == "reset_gpu":
            self.ledger.resets.append((host, command["args"]["gpu"], summary if outcome == "failed" else outcome, now))
            if outcome == "succeeded" and A.reset_cures(node, command["args"]["gpu"]):
                self._cure(node, f"rung {F.RESET}", now)
        elif verb == "reboot" and outcome == "succeeded":
            node.booted_at, node.up_at = now, now + timedelta(minutes=A.RESTART_MINUTES["reboot"])
            if node.fault is not None and F.rung_cures(F.REBOOT, node.fault.cure):
                self._cure(node, f"rung {F.REBOOT}", now)
        self.api.post_command_result(node, command["id"], {"status": outcome, "summary": summary, "result": {}})
        self._news.add(host)
