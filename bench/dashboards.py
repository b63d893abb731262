"""Benchmark the dashboards on a big fleet: 100,000 nodes with a year of history.

1. Generation (figures, not a test of the services): every node's life is simulated from its
   enrollment to now, as the services would have written it: Day 0 and Day 1 (state changes,
   stage runs for the last 60 days), then incidents (about two a year per node: catastrophic
   findings cordoned at once, degraded ones drained when the job ends, customers' drains),
   each with its finding, finding event, alert, remediation with its steps and decisions, the
   rungs of the ladder (reboot, power cycle, ... repair, RMA), the re-validation back to
   production; warning findings that resolve by themselves; and the hourly state-count
   snapshots per cluster, tenant and state derived from those lives. Rows go in with COPY,
   5,000 nodes at a time, on one connection; nothing is written through the ORM. Then the derived
   tables are filled the way a deployment fills them after a bulk load: the daily roll-ups of the
   snapshots (``nodes.statecounts.roll_up``, which the hourly snapshot task runs) and of the state
   changes (``reports.flows.roll_up``, hourly too), and the outage rows (``reports.outages.rebuild``,
   which each recorded state change runs for its node).
2. Measurement: Django's test client (no HTTP server) as an operator, each page and API
   endpoint requested ``--requests`` times after one warm-up: p50 and p95 of the wall time,
   and the number of queries of one request.

Targets: p95 under 300 ms. Run with ``bin/bench dashboards`` (a throwaway PostgreSQL);
``--sizes 10000,100000`` measures at each size in turn (the database grows between them),
so the trend with fleet size shows.

Usage: bin/bench dashboards [--sizes 10000,100000] [--days 365] [--requests 20] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from array import array
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "false")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.db.models import Model  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0
CHUNK = 5_000  # nodes per round of COPY
STAGE_RUN_DAYS = 60  # stage runs are written for the Day 1 passes of the last 60 days only
CLUSTERS = 10
TENANTS = 6
NULL = r"\N"

S_DAY1 = ("firmware_update", "inventory_check", "burn_in", "fabric_check", "reliability_assessment")
STAGE_KIND = dict(
    zip(
        S_DAY1, ("stage_firmware", "stage_inventory", "stage_burn_in", "stage_fabric", "stage_reliability"), strict=True
    )
)
CATASTROPHIC = (
    ("xid", 79, "XID 79: GPU has fallen off the bus", "reboot"),
    ("xid", 48, "XID 48: double-bit ECC error", "reset_gpu"),
    ("xid", 94, "XID 94: contained ECC error", "reset_gpu"),
    ("xid", 119, "XID 119: GSP RPC timeout", "reboot"),
    ("ecc_uncorrectable", None, "Uncorrectable ECC errors on GPU", "reboot"),
    ("gpu_missing", None, "GPU missing: 7 of 8 seen", "power_cycle"),
)
DEGRADED = (
    ("nvlink_crc_rate", None, "NVLink CRC errors rising", "reboot"),
    ("pcie_degraded", None, "PCIe link x8, expected x16", "power_cycle"),
    ("ib_port_down", None, "InfiniBand port mlx5_3 down", "reboot"),
    ("ib_fabric", None, "Fabric ticket: link down", "inspect"),
    ("row_remap_pending", None, "Row remapping pending", "reset_gpu"),
    ("host_edac_uncorrected", None, "EDAC uncorrected memory error", "inspect"),
)
WARNINGS = (
    ("gpu_temperature", "GPU temperature 86 C"),
    ("ib_errors_rising", "Symbol errors rising on mlx5_1"),
    ("clock_slowdown", "Thermal clock slowdown"),
)
RUNG_MINUTES = {"gpu_reset": 5, "reboot": 12, "power_cycle": 18, "reimage": 60}
SEVERITY_RANK = {"info": 0, "warning": 1, "degraded": 2, "catastrophic": 3}


# --- COPY ----------------------------------------------------------------------------------------


class Table:
    """Rows of one model as COPY text: the varying columns are given per row, the rest are the
    model's defaults rendered once (the row is one ``str.format``: generation is the bottleneck)."""

    def __init__(self, model: type[Model], varying: list[str]) -> None:
        self.model, self.varying = model, varying
        fields = list(model._meta.concrete_fields)
        unknown = set(varying) - {f.attname for f in fields}
        assert not unknown, unknown
        parts = []
        for f in fields:
            parts.append("{}" if f.attname in varying else self._default(f).replace("{", "{{").replace("}", "}}"))
        self.template = "\t".join(parts) + "\n"
        order = [f.attname for f in fields if f.attname in varying]
        assert order == varying, f"{model.__name__}: give {order}"
        self.columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        self.lines: list[str] = []
        self.written = 0

    @staticmethod
    def _default(field: Any) -> str:
        if field.has_default():
            value = field.get_default()
            if isinstance(value, bool):
                return "t" if value else "f"
            if isinstance(value, dict | list):
                return json.dumps(value)
            return str(value)
        if field.null:
            return NULL
        return ""

    def add(self, *values: Any) -> None:
        self.lines.append(self.template.format(*values))

    def flush(self, cursor: Any) -> None:
        if not self.lines:
            return
        with cursor.copy(f"COPY {self.model._meta.db_table} ({self.columns}) FROM STDIN") as copy:
            copy.write("".join(self.lines).encode())
        self.written += len(self.lines)
        self.lines = []


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


# --- One node's life -----------------------------------------------------------------------------


class Fleet:
    """The tables being written, the ids handed out, and the hourly snapshot counters."""

    def __init__(self, now: float, days: int, seed: int) -> None:
        from health.models import Alert, Finding
        from nodes.models import Node, NodeEvent, Run, StateCountSnapshot
        from remediation.models import Remediation, RemediationStep

        self.now, self.start = now, now - days * DAY
        self.rng = random.Random(seed)
        self.nodes = Table(
            Node,
            [
                "id",
                "hostname",
                "serial",
                "bmc_address",
                "site_id",
                "cluster_id",
                "tenant_id",
                "hardware_profile_id",
                "state",
                "state_changed_at",
                "is_revalidation",
                "created",
                "last_updated",
            ],
        )
        self.events = Table(
            NodeEvent,
            [
                "id",
                "node_id",
                "hostname",
                "created",
                "kind",
                "transition",
                "source_state",
                "target_state",
                "reason",
                "actor_kind",
                "actor_name",
                "details",
            ],
        )
        self.findings = Table(
            Finding,
            [
                "id",
                "node_id",
                "hostname",
                "gpu_index",
                "rule",
                "xid",
                "severity",
                "recommended_action",
                "summary",
                "evidence",
                "source",
                "subject",
                "observed_at",
                "created",
                "alert_id",
                "event_id",
            ],
        )
        self.alerts = Table(
            Alert,
            [
                "id",
                "node_id",
                "gpu_index",
                "rule",
                "subject",
                "dedupe_key",
                "severity",
                "severity_rank",
                "recommended_action",
                "summary",
                "state",
                "first_seen",
                "last_seen",
                "occurrences",
                "resolved_at",
                "resolved_reason",
                "resolved_by",
                "last_finding_id",
            ],
        )
        self.remediations = Table(
            Remediation,
            [
                "id",
                "node_id",
                "finding_id",
                "status",
                "urgency",
                "rung",
                "created",
                "updated",
                "finished",
                "finding_created",
                "decisions",
            ],
        )
        self.steps = Table(
            RemediationStep,
            ["id", "remediation_id", "rung", "status", "started", "finished", "deadline", "attempts", "last_activity"],
        )
        self.runs = Table(Run, ["id", "node_id", "kind", "status", "created", "started", "finished", "summary"])
        self.snapshot_table = StateCountSnapshot
        self.tables = [self.nodes, self.events, self.findings, self.alerts, self.remediations, self.steps, self.runs]
        self.ids = {t.model.__name__: 0 for t in self.tables}
        self.hours = int((now - self.start) // HOUR)
        # (cluster, tenant, state) -> +1/-1 at the first snapshot hour of each stay's start and end.
        self.diffs: dict[tuple[int, int | None, str], array] = {}

    def next_id(self, table: Table) -> int:
        self.ids[table.model.__name__] += 1
        return self.ids[table.model.__name__]

    def stay(self, key: tuple[int, int | None, str], a: float, b: float) -> None:
        """The node counted in ``key`` at every snapshot hour in [a, b)."""
        i0 = max(math.ceil((a - self.start) / HOUR), 0)
        i1 = min(math.ceil((b - self.start) / HOUR), self.hours + 1)
        if i1 <= i0:
            return
        diff = self.diffs.get(key)
        if diff is None:
            diff = self.diffs[key] = array("i", bytes(4 * (self.hours + 2)))
        diff[i0] += 1
        diff[i1] -= 1


class Life:
    """One node's simulated life, written as rows as it goes."""

    def __init__(self, fleet: Fleet, node_id: int, cluster_id: int, tenant_id: int | None) -> None:
        self.f, self.id, self.cluster, self.tenant = fleet, node_id, cluster_id, tenant_id
        self.host = f"gpu-{node_id:06d}"
        self.state, self.since, self.enrolled = "enrolled", 0.0, 0.0
        self.rng = fleet.rng
        self.found_at: dict[int, float] = {}  # finding id -> when (the remediation keeps a copy)

    # Rows ---------------------------------------------------------------------------------------

    def change(self, t: float, target: str, transition: str, actor: str, reason: str, details: str = "{}") -> None:
        f = self.f
        f.stay((self.cluster, self.tenant, self.state), self.since, t)
        kind = "system" if actor.startswith("system:") else "user"
        f.events.add(
            f.next_id(f.events),
            self.id,
            self.host,
            ts(t),
            "transition",
            transition,
            self.state,
            target,
            reason,
            kind,
            actor,
            details,
        )
        self.state, self.since = target, t

    def event(self, t: float, kind: str, actor: str, reason: str, details: str = "{}") -> int:
        f = self.f
        pk = f.next_id(f.events)
        f.events.add(pk, self.id, self.host, ts(t), kind, "", self.state, "", reason, "system", actor, details)
        return pk

    def finding(
        self, t: float, rule: str, xid: int | None, severity: str, action: str, summary: str, resolved: float | None
    ) -> int:
        """A finding, its history event and its alert (resolved at ``resolved`` unless None)."""
        f = self.f
        fid, aid = f.next_id(f.findings), f.next_id(f.alerts)
        gpu = self.rng.randrange(8) if rule not in ("ib_port_down", "ib_fabric", "host_edac_uncorrected") else None
        subject = f"xid:{xid}" if xid else ("ticket:1" if rule == "ib_fabric" else "")
        evidence = '{"kind": "link_down"}' if rule == "ib_fabric" else "{}"
        eid = self.event(t, "finding", "system:health", summary, f'{{"finding": {fid}}}')
        self.found_at[fid] = t
        f.findings.add(
            fid,
            self.id,
            self.host,
            NULL if gpu is None else gpu,
            rule,
            NULL if xid is None else xid,
            severity,
            action,
            summary,
            evidence,
            "agent",
            subject,
            ts(t),
            ts(t),
            aid,
            eid,
        )
        state = "firing" if resolved is None else "resolved"
        f.alerts.add(
            aid,
            self.id,
            NULL if gpu is None else gpu,
            rule,
            subject,
            f"{rule}|{gpu}|{subject}",
            severity,
            SEVERITY_RANK[severity],
            action,
            summary,
            state,
            ts(t),
            ts(resolved or self.f.now),
            self.rng.randint(1, 40),
            ts(resolved) if resolved else NULL,
            "condition cleared" if resolved else "",
            "system:health" if resolved else "",
            fid,
        )
        return fid

    # Phases -------------------------------------------------------------------------------------

    def day1(self, t: float, entry: str, actor: str) -> float:
        """A Day 1 pass from ``t``: the five stages, then production. Returns when it ended."""
        self.change(
            t,
            "firmware_update",
            entry,
            actor,
            "Day 1 validation" if entry == "start_validation" else "Back for re-validation",
        )
        durations = (
            self.rng.uniform(5, 20) * MIN,
            self.rng.uniform(2, 10) * MIN,
            self.rng.uniform(3, 6) * HOUR,
            self.rng.uniform(5, 15) * MIN,
            HOUR + self.rng.uniform(0, 10) * MIN,
        )
        names = ("pass_firmware", "pass_inventory_check", "pass_burn_in", "pass_fabric_check", "release_to_production")
        targets = (*S_DAY1[1:], "production")
        for stage, duration, name, target in zip(S_DAY1, durations, names, targets, strict=True):
            if t + duration > self.f.now:
                return math.inf
            self.stage_run(stage, t, t + duration, "passed")
            t += duration
            self.change(t, target, name, "system:validation", f"{stage.replace('_', ' ')} passed")
        return t

    def stage_run(self, stage: str, a: float, b: float, status: str) -> None:
        f = self.f
        if b >= f.now - STAGE_RUN_DAYS * DAY:
            f.runs.add(f.next_id(f.runs), self.id, STAGE_KIND[stage], status, ts(a), ts(a), ts(b), f"{stage} {status}")

    def live(self, enrolled: float) -> None:
        """From enrollment to now."""
        now, rng = self.f.now, self.rng
        self.since = enrolled
        t = enrolled
        for target, name, gap in (
            ("initializing", "start_initialization", 2 * MIN),
            ("onboard", "mark_onboard", rng.uniform(15, 40) * MIN),
        ):
            t += gap
            if t > now:
                return
            self.change(t, target, name, "system:provisioning", "Day 0")
        t = self.day1(t + 5 * MIN, "start_validation", "system:validation")
        while t < now:
            t += rng.expovariate(1 / (180 * DAY))  # about two incidents a year
            for _ in range(rng.choice((0, 1, 1, 2))):  # warnings that clear by themselves
                w = t - rng.uniform(0, 90 * DAY)
                if self.f.start < w < now:
                    rule, summary = rng.choice(WARNINGS)
                    cleared = min(w + rng.uniform(10 * MIN, 6 * HOUR), now - 1)
                    self.finding(w, rule, None, "warning", "none", summary, cleared)
            if t >= now:
                break
            kind = rng.random()
            if kind < 0.55:
                t = self.incident(t, rng.choice(CATASTROPHIC), "catastrophic")
            elif kind < 0.90:
                t = self.incident(t, rng.choice(DEGRADED), "degraded")
            else:
                t = self.customer_drain(t)

    def customer_drain(self, t: float) -> float:
        rng, now = self.rng, self.f.now
        self.change(t, "drain_pending", "request_drain", "operator", "Customer asked for a reimage (ticket CS-1042)")
        steps = (
            ("draining", "start_draining", "system:followup", rng.uniform(0.5, 8) * HOUR, "No job running"),
            ("triage", "complete_drain", "system:followup", rng.uniform(5, 30) * MIN, "Drained"),
        )
        for target, name, actor, gap, reason in steps:
            t += gap
            if t > now:
                return math.inf
            self.change(t, target, name, actor, reason)
        t += rng.uniform(1, 6) * HOUR
        return self.day1(t, "revalidate", "operator") if t < now else math.inf

    def incident(self, t: float, finding: tuple[str, int | None, str, str], severity: str) -> float:
        """A finding taken out of production and remediated up the ladder until back (or now)."""
        f, rng, now = self.f, self.rng, self.f.now
        rule, xid, summary, action = finding
        rem_id = f.next_id(f.remediations)
        fid = self.finding(t, rule, xid, severity, action, summary, None)  # resolved below if it ends
        details = json.dumps({"remediation": rem_id})
        self.event(t + 1, "action", "system:remediation", f"Remediation: {summary} -> {severity}", details)
        rung = {"reset_gpu": "gpu_reset", "inspect": "repair"}.get(action, action)
        status, finished = "running", None
        if severity == "catastrophic":
            self.change(
                t + 2, "triage", "cordon", "system:remediation", f"Remediation {rem_id}: {summary} (act now)", details
            )
            t += 2
        else:
            self.change(
                t + 2,
                "drain_pending",
                "request_drain",
                "system:remediation",
                f"Remediation {rem_id}: {summary}",
                details,
            )
            t += 2 + rng.expovariate(1 / (6 * HOUR))
            if t > now:
                return self._open(rem_id, fid, "draining", rung, t - 2, finding, severity)
            self.change(t, "draining", "start_draining", "system:remediation", "The job ended: draining", details)
            t += rng.uniform(2, 20) * MIN
            if t > now:
                return self._open(rem_id, fid, "draining", rung, t, finding, severity)
            self.change(t, "triage", "complete_drain", "system:remediation", "Drained", details)
        began = t
        ladder = ["gpu_reset", "reboot", "power_cycle", "reimage", "repair", "rma"]
        start = ladder.index(rung)
        for rung in ladder[start:]:
            if rung in ("repair", "rma"):
                return self._hand_off(t, rem_id, fid, rung, began, finding, severity, details)
            t += rng.uniform(10, 120)
            if t > now:
                return self._open(rem_id, fid, "running", rung, began, finding, severity)
            self.change(t, "remediating", "start_remediation", "system:remediation", f"Rung: {rung}", details)
            took = RUNG_MINUTES[rung] * MIN * rng.uniform(0.7, 1.5)
            ok = rng.random() < 0.8
            self._step(rem_id, rung, t, t + took if t + took < now else None, ok)
            t += took
            if t > now:
                return self._open(rem_id, fid, "running", rung, began, finding, severity)
            if ok:
                back = self.day1(t, "revalidate", "system:remediation")
                status = "succeeded" if back < now else "validating"
                finished = back if back < now else None
                self._remediation(rem_id, fid, status, rung, began, finished, severity)
                self._resolve(fid, back)
                return back
            self.change(t, "triage", "fail_remediation", "system:remediation", f"{rung} did not help", details)
        return math.inf

    def _hand_off(
        self, t: float, rem_id: int, fid: int, rung: str, began: float, finding: Any, severity: str, details: str
    ) -> float:
        rng, now = self.rng, self.f.now
        t += rng.uniform(1, 10) * MIN
        if t > now:
            return self._open(rem_id, fid, "running", rung, began, finding, severity)
        target = "rma" if rung == "rma" or rng.random() < 0.05 else "repair"
        self.change(
            t,
            target,
            "send_to_rma" if target == "rma" else "send_to_repair",
            "system:remediation",
            f"Handed to {'the vendor' if target == 'rma' else 'a technician'}",
            details,
        )
        self._remediation(rem_id, fid, "handed_off", target, began, t, severity)
        t += (rng.uniform(10, 30) if target == "rma" else rng.uniform(1, 7)) * DAY
        if t > now:
            return math.inf
        back = self.day1(t, "revalidate", "technician")
        self._resolve(fid, back)
        return back

    def _step(self, rem_id: int, rung: str, a: float, b: float | None, ok: bool) -> None:
        f = self.f
        status = "running" if b is None else ("passed" if ok else "failed")
        f.steps.add(
            f.next_id(f.steps),
            rem_id,
            rung,
            status,
            ts(a),
            ts(b) if b else NULL,
            ts(a + RUNG_MINUTES.get(rung, 60) * 3 * MIN),
            1,
            ts(b or a),
        )

    def _remediation(
        self, rem_id: int, fid: int, status: str, rung: str, began: float, finished: float | None, severity: str
    ) -> None:
        f = self.f
        urgency = "now" if severity == "catastrophic" else "when_idle"
        decisions = json.dumps(
            [
                {
                    "at": ts(began),
                    "what": f"{severity}: {urgency}, first rung {rung}",
                    "who": "system:remediation",
                    "finding": fid,
                }
            ]
        )
        f.remediations.add(
            rem_id,
            self.id,
            fid,
            status,
            urgency,
            rung,
            ts(began),
            ts(finished or began),
            ts(finished) if finished else NULL,
            ts(self.found_at[fid]),
            decisions,
        )

    def _open(self, rem_id: int, fid: int, status: str, rung: str, began: float, finding: Any, severity: str) -> float:
        self._remediation(rem_id, fid, status, rung, began, None, severity)
        return math.inf

    def _resolve(self, fid: int, at: float) -> None:
        """Alerts were written firing; one whose incident ended is rewritten resolved (same row)."""
        if at >= self.f.now:
            return
        alerts = self.f.alerts.lines
        for i in range(len(alerts) - 1, -1, -1):
            cols = alerts[i].split("\t")
            if cols[-1] == f"{fid}\n":
                # Columns: 10 state, 12 last_seen, 15 resolved_at, 16 resolved_reason, 17 resolved_by.
                cols[10], cols[12], cols[15] = "resolved", ts(at), ts(at)
                cols[16], cols[17] = "the node is back in production", "system:remediation"
                alerts[i] = "\t".join(cols)
                return

    def close(self) -> None:
        """The node's row, and its last stay up to now for the snapshots."""
        f = self.f
        f.stay((self.cluster, self.tenant, self.state), self.since, f.now + HOUR)
        revalidating = self.state in S_DAY1 and self.since > self.f.start
        bmc = f"10.{self.id // 65536}.{self.id // 256 % 256}.{self.id % 256}"
        tenant = NULL if self.tenant is None else self.tenant
        f.nodes.add(
            self.id,
            self.host,
            f"SN{self.id:09d}",
            bmc,
            1 + self.cluster % 2,
            self.cluster,
            tenant,
            1,
            self.state,
            ts(self.since),
            "t" if revalidating else "f",
            ts(self.enrolled),
            ts(self.f.now),
        )


# --- Generation ----------------------------------------------------------------------------------


def fleet_rows() -> dict[str, Any]:
    """Sites, clusters, tenants, a hardware profile and the users the pages are requested as."""
    from django.contrib.auth.models import Group

    from fleet.models import Cluster, HardwareProfile, Site, Tenant
    from tests.factories import UserFactory

    sites = [Site.objects.create(pk=i, name=f"Site {i}", slug=f"site-{i}") for i in (1, 2)]
    clusters = [
        Cluster.objects.create(pk=i, site=sites[i % 2], name=f"cluster-{i:02d}") for i in range(1, CLUSTERS + 1)
    ]
    tenants = [Tenant.objects.create(pk=i, name=f"Tenant {i}", slug=f"tenant-{i}") for i in range(1, TENANTS + 1)]
    HardwareProfile.objects.create(
        pk=1, name="HGX H100 8-GPU", gpu_model="NVIDIA H100 80GB HBM3", gpu_count=8, memory_gb=2048
    )
    operator = UserFactory(username="bench-operator", is_staff=True)
    operator.groups.add(Group.objects.get(name="Operators"))
    customer = UserFactory(username="bench-customer", tenant=tenants[0])
    return {"clusters": clusters, "tenants": tenants, "operator": operator, "customer": customer}


def generate(fleet: Fleet, first: int, last: int) -> None:
    """Nodes ``first`` to ``last`` (ids), their lives, in rounds of ``CHUNK`` nodes."""
    rng = fleet.rng
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        for lo in range(first, last + 1, CHUNK):
            for node_id in range(lo, min(lo + CHUNK, last + 1)):
                cluster = 1 + node_id % CLUSTERS
                # Each cluster is mostly one tenant's; 15 % of nodes are unassigned capacity.
                tenant = None if rng.random() < 0.15 else 1 + cluster % TENANTS
                life = Life(fleet, node_id, cluster, tenant)
                # Half the fleet predates the year; the rest came in over it.
                if rng.random() < 0.5:
                    life.enrolled = fleet.start - rng.uniform(1, 60) * DAY
                else:
                    life.enrolled = rng.uniform(fleet.start, fleet.now - DAY)
                life.live(life.enrolled)
                life.close()
            # One transaction per round: findings and alerts point at each other (deferred checks).
            with transaction.atomic():
                for table in fleet.tables:
                    table.flush(cursor)


def write_snapshots(fleet: Fleet) -> int:
    """The hourly counts per (cluster, tenant, state), from the lives' stays (zero counts not stored)."""
    table = Table(fleet.snapshot_table, ["id", "taken_at", "state", "cluster_id", "tenant_id", "count"])
    hour0 = math.ceil(fleet.start / HOUR) * HOUR
    stamps = [ts(hour0 + i * HOUR) for i in range(fleet.hours + 1)]
    pk = 0
    with connection.cursor() as wrapper:
        wrapper.execute(f"TRUNCATE {fleet.snapshot_table._meta.db_table}")
        for (cluster, tenant, state), diff in fleet.diffs.items():
            count = 0
            for i in range(fleet.hours + 1):
                count += diff[i]
                if count:
                    pk += 1
                    table.add(pk, stamps[i], state, cluster, NULL if tenant is None else tenant, count)
            if len(table.lines) > 200_000:
                table.flush(wrapper.cursor)
        table.flush(wrapper.cursor)
    return table.written


def derive() -> dict[str, int]:
    """The daily roll-ups of the snapshots and of the state changes, and the outage rows, by the code
    that keeps them."""
    from nodes import statecounts
    from nodes.models import DailyStateCount
    from reports import flows, outages
    from reports.models import DailyTransitionCount

    DailyStateCount.objects.all().delete()  # the snapshots were rewritten whole (a second --sizes round)
    DailyTransitionCount.objects.all().delete()  # a second round's lives reach back a year too
    return {"daily": statecounts.roll_up(), "flows": flows.roll_up(), "outages": outages.rebuild()}


def finish(fleet: Fleet) -> None:
    """Sequences past the ids handed out; history tables laid out in time order; fresh statistics
    and visibility maps.

    Lives are written node by node, so each page of the history tables would hold rows from the
    whole year; in production they are appended as time goes by, and a month's rows sit together.
    CLUSTER on the time index restores that layout: without it, every query over a period reads
    every page of the table, which no real deployment does."""
    from health.models import Finding
    from nodes.models import DailyStateCount, NodeEvent, StateCountSnapshot
    from reports.models import Outage

    with connection.cursor() as cursor:
        for table in [*fleet.tables]:
            name = table.model._meta.db_table
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT COALESCE(MAX(id), 1) FROM {name}))"  # noqa: S608 - table names from the models
            )
        for model, column in (
            (NodeEvent, "created"),
            (Finding, "created"),
            (StateCountSnapshot, "taken_at"),
            (DailyStateCount, "day"),
            (Outage, "started"),
        ):
            table = model._meta.db_table
            index = next(
                name
                for name, c in connection.introspection.get_constraints(cursor, table).items()
                if c["index"] and c["columns"] == [column]
            )
            cursor.execute(f"CLUSTER {table} USING {connection.ops.quote_name(index)}")
        # VACUUM as well: autovacuum visits insert-only tables in a deployment (PostgreSQL 13+) and
        # sets the visibility map, which the reports' covering indexes need to answer from the index alone.
        cursor.execute("VACUUM ANALYZE")


# --- Measurement ---------------------------------------------------------------------------------


def endpoints(fleet: Fleet, users: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, user, URL) of every page and API call measured."""
    from django.db.models import Count

    from nodes.models import NodeEvent

    # The busiest of the first 2,000 nodes: the longest history page.
    node_id = (
        NodeEvent.objects.filter(node_id__lte=2000)
        .values("node_id")
        .annotate(n=Count("id"))
        .order_by("-n")
        .values_list("node_id", flat=True)
        .first()
        or 1
    )
    now = datetime.fromtimestamp(fleet.now, UTC)
    days90 = urlencode({"since": (now - timedelta(days=90)).isoformat()})
    days30 = urlencode({"since": (now - timedelta(days=30)).isoformat()})
    flow = urlencode({"days": 90, "source": "production", "target": "triage"})
    return [
        ("fleet overview /", "operator", "/"),
        ("node list, filtered", "operator", "/nodes/?state=production&cluster=cluster-03&ordering=-state_changed_at"),
        ("node list, search", "operator", "/nodes/?q=gpu-0042"),
        ("node history page", "operator", f"/nodes/{node_id}/"),
        ("alert list", "operator", "/alerts/"),
        ("reports (Sankey), 30 d", "operator", "/reports/?days=30"),
        ("reports (Sankey), 90 d", "operator", "/reports/?days=90"),
        ("reports, 30 d, 1 cluster", "operator", "/reports/?days=30&cluster=cluster-03"),
        ("flow list, 90 d", "operator", f"/reports/flows/?{flow}"),
        ("availability, customer", "customer", "/reports/availability/?days=30"),
        ("metrics", "operator", "/metrics"),
        (
            "API nodes, filtered",
            "operator",
            "/api/nodes/?state=production&cluster=cluster-03&ordering=-state_changed_at",
        ),
        ("API node history", "operator", f"/api/nodes/{node_id}/history/"),
        ("API alerts", "operator", "/api/alerts/"),
        ("API flows, 90 d", "operator", f"/api/reports/flows/?{days90}"),
        ("API availability, customer", "customer", f"/api/reports/availability/?{days30}"),
    ]


def measure(name: str, client: Any, url: str, requests: int) -> dict[str, Any]:
    queries: list[str] = []
    # Django resets connection.queries at each request start, so count with a wrapper.
    with connection.execute_wrapper(lambda ex, sql, *a: (queries.append(sql), ex(sql, *a))[1]):
        response = client.get(url)
    assert response.status_code == 200, (name, url, response.status_code, response.content[:300])
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(url)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
    return {"name": name, "queries": len(queries), "p50": statistics.median(times), "p95": p95}


def report(size: int, results: list[dict[str, Any]], target: float) -> None:
    print(f"\n{size:,} nodes: p50 / p95 over the requests, queries of one request (target p95 < {target:.0f} ms)")
    print(f"{'endpoint':32} {'p50 ms':>9} {'p95 ms':>9} {'queries':>8}  ")
    for r in results:
        flag = "" if r["p95"] < target else "  MISSES"
        print(f"{r['name']:32} {r['p50']:9.1f} {r['p95']:9.1f} {r['queries']:8d}{flag}")


def counts() -> dict[str, int]:
    from health.models import Alert, Finding
    from nodes.models import DailyStateCount, Node, NodeEvent, Run, StateCountSnapshot
    from remediation.models import Remediation, RemediationStep
    from reports.models import DailyTransitionCount, Outage

    return {
        m.__name__: m.objects.count()
        for m in (
            Node,
            NodeEvent,
            Finding,
            Alert,
            Remediation,
            RemediationStep,
            Run,
            StateCountSnapshot,
            DailyStateCount,
            DailyTransitionCount,
            Outage,
        )
    }


def run(sizes: list[int], days: int, requests: int, seed: int, target: float) -> None:
    from django.test import Client

    if connection.vendor != "postgresql":
        raise SystemExit("bench/dashboards.py needs PostgreSQL (COPY): run it with bin/bench dashboards")
    fleet = Fleet(time.time(), days, seed)
    users = fleet_rows()
    clients = {}
    for who in ("operator", "customer"):
        clients[who] = Client()
        clients[who].force_login(users[who])
    made = 0
    for size in sizes:
        started = time.perf_counter()
        generate(fleet, made + 1, size)
        lives = time.perf_counter() - started
        snapshots = write_snapshots(fleet)
        derived = derive()
        finish(fleet)
        made = size
        took = time.perf_counter() - started
        rows = counts()
        print(
            f"\ngenerated {size:,} nodes x {days} days in {took:.0f} s (lives and COPY {lives:.0f} s; snapshots, "
            f"roll-ups, outages, CLUSTER and ANALYZE {took - lives:.0f} s): "
            + ", ".join(f"{k} {v:,}" for k, v in rows.items())
        )
        assert rows["StateCountSnapshot"] == snapshots
        assert (rows["DailyStateCount"], rows["DailyTransitionCount"], rows["Outage"]) == (
            derived["daily"],
            derived["flows"],
            derived["outages"],
        )
        results = [measure(name, clients[who], url, requests) for name, who, url in endpoints(fleet, users)]
        report(size, results, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="fleet sizes to measure at, ascending")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--target-ms", type=float, default=300.0)
    parser.add_argument("--keep", action="store_true", help="keep the generated database (test_<name>) to explore")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        print(f"database: {connection.vendor} {connection.pg_version if connection.vendor == 'postgresql' else ''}")
        run(sizes, args.days, args.requests, args.seed, args.target_ms)
    finally:
        if args.keep:
            print(f"kept the database {connection.settings_dict['NAME']}")
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
