"""Virtual node agents: what each simulated server's agent sends, through the real agent API.

Every report is the wire format of ``telemetry.schema.AgentReport`` (built from
``telemetry.testing.make_report``, an HGX H100 8-GPU board), posted to
``POST /api/agent/reports/`` with the node's own agent token; active checks are taken with
``GET /api/agent/checks/`` and answered with ``POST /api/agent/checks/<id>/result/``. The
requests go through Django's request handler in this process (``django.test.Client``:
URL routing, middleware, DRF authentication and validation, the ingest service), not over a
socket, so that 54 simulated days fit in minutes; an answer other than 2xx is counted as an
error of the run, never ignored.

A fault leaves its signature in the reports while it lasts: the XID line once, then the
GPU's own flags (fallen off the bus: the GPU is missing; reset wanted: recovery action 1;
row remap pending; too hot with HW_THERMAL slowdown), a port down, host memory errors, a
failed disk; a silent fault sends nothing at all.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.test import Client

from telemetry.testing import make_report, make_xid

from . import faults as F

HW_THERMAL = 0x40
GPU_FAIL_KINDS = {F.XID, F.ROW_REMAP, F.THERMAL}


@dataclass
class SimFault:
    """One injected fault: the ground truth the report compares Nodewarden's actions with."""

    id: int
    fault: F.FaultClass
    host: str
    at: datetime
    cure: str
    gpu: int = 0
    hca: int = 0
    xid: int | None = None
    cured_at: datetime | None = None
    cured_by: str = ""
    announced: bool = False  # the one-off XID line has been sent
    repeats: int = 0  # restarts of the job it crashed again

    @property
    def active(self) -> bool:
        return self.cured_at is None


@dataclass
class VirtualNode:
    node_id: int
    hostname: str
    token: str
    index: int
    seq: int = 0
    fault: SimFault | None = None  # the defect it carries now (cured faults are kept in the ledger)
    noise: dict[str, tuple[SimFault, datetime]] = field(default_factory=dict)  # key -> (signal, until)
    ecc_uncorrected: int = 0  # cumulative counters as the hardware counts them
    edac_uncorrected: int = 0
    link_downed: int = 0
    booted_at: datetime | None = None
    up_at: datetime | None = None  # a restarting host is back (POST, BIOS, OS, agent) at this instant

    def booting(self, now: datetime) -> bool:
        return self.up_at is not None and now < self.up_at

    @property
    def silent(self) -> bool:
        return self.fault is not None and self.fault.fault.signature == F.SILENT

    def signals(self, now: datetime) -> list[SimFault]:
        live = [f for f, until in self.noise.values() if until > now]
        return ([self.fault] if self.fault is not None else []) + live


class AgentApi:
    """The agent endpoints, called in-process; counts what was sent and what was refused."""

    def __init__(self) -> None:
        self.client = Client(raise_request_exception=False)
        self.reports = 0
        self.requests = 0
        self.errors: list[str] = []
        self.refused = 0

    def _call(self, method: str, path: str, token: str, body: Any = None) -> Any:
        self.requests += 1
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        if method == "get":
            response = self.client.get(path, **headers)
        else:
            response = self.client.post(path, data=json.dumps(body), content_type="application/json", **headers)
        if response.status_code >= 300:
            self.refused += 1
            if len(self.errors) < 50:  # the first ones in full; the count says how many there were
                self.errors.append(f"{method.upper()} {path}: {response.status_code} {response.content[:300]!r}")
            return None
        return response.json() if response.content else {}

    def send(self, node: VirtualNode, reports: list[dict[str, Any]]) -> bool:
        if not reports:
            return True
        self.reports += len(reports)
        return self._call("post", "/api/agent/reports/", node.token, {"reports": reports}) is not None

    def join(self, node: VirtualNode, join_token: str) -> dict[str, Any] | None:
        """What a reinstalled node's cloud-init runs: ``nodewarden-agent join`` (the agent's contract)."""
        return self._call(
            "post", "/api/agent/join/", "", {"join_token": join_token, "hostname": node.hostname, "facts": {}}
        )

    def claim_checks(self, node: VirtualNode) -> list[dict[str, Any]]:
        answer = self._call("get", "/api/agent/checks/", node.token)
        return list((answer or {}).get("checks") or [])

    def post_result(self, node: VirtualNode, run_id: int, result: dict[str, Any]) -> None:
        self._call("post", f"/api/agent/checks/{run_id}/result/", node.token, result)

    def take_commands(self, node: VirtualNode) -> list[dict[str, Any]]:
        """The agent's command poll: ``GET /api/agent/commands/`` (each command is handed out once)."""
        answer = self._call("get", "/api/agent/commands/", node.token)
        return list((answer or {}).get("commands") or [])

    def post_command_result(self, node: VirtualNode, command_id: int, result: dict[str, Any]) -> None:
        self._call("post", f"/api/agent/commands/{command_id}/result/", node.token, result)


# How long the agent takes over each verb, simulated: ``nvidia-smi -r`` on one GPU (driver unload
# and reload of that GPU) against a host's restart through the operating system.
COMMAND_MINUTES = {"reset_gpu": 2.0, "reboot": 5.0, "collect_diagnostics": 1.0}
# A restarted 8-GPU server answers again this long after the BMC's restart: POST and memory training
# of 2 TB of DIMMs, the GPUs' and NICs' option ROMs, the OS and the agent (minutes; our estimate).
RESTART_MINUTES = {"reboot": 8.0, "power_cycle": 10.0}


def reset_cures(node: VirtualNode, gpu: int) -> bool:
    """A reset of this GPU clears the node's defect: it is on that GPU and a reset is all it needs."""
    fault = node.fault
    return fault is not None and fault.gpu == gpu and fault.fault.signature in GPU_FAIL_KINDS and fault.cure == F.RESET


def command_outcome(node: VirtualNode, command: dict[str, Any], *, busy: bool) -> tuple[timedelta, str, str]:
    """What the agent's run of one command comes to: (time it takes, "succeeded"/"failed", summary).

    reset_gpu fails "busy" while a process holds the GPU (the engine says when), and "did not clear"
    when the node's defect needs more than a reset (or is elsewhere); otherwise it succeeds."""
    verb, args = command["verb"], command.get("args") or {}
    took = timedelta(minutes=COMMAND_MINUTES.get(verb, 1.0))
    if verb == "reset_gpu":
        gpu = args.get("gpu", 0)
        if busy:
            return timedelta(seconds=5), "failed", "busy: 1 process"  # nvidia-smi refuses at once
        if node.fault is not None and not reset_cures(node, gpu):
            return took, "failed", "reset did not clear the fault"
        return took, "succeeded", f"GPU {gpu} reset"
    if verb == "reboot":
        return took, "succeeded", "rebooting"
    if verb == "collect_diagnostics":
        return took, "succeeded", "diagnostics bundle: " + ", ".join(args.get("collect") or [])
    return timedelta(seconds=1), "failed", f"unknown verb {verb!r}"


def report(node: VirtualNode, now: datetime, *, busy: bool, rng: random.Random) -> dict[str, Any] | None:
    """The node's report at ``now``: None when it is silent (a dead host reports nothing)."""
    if node.silent or node.booting(now):
        return None
    node.seq += 1
    body = make_report(node.hostname, collected_at=now, seed=node.seq, seq=node.seq)
    body["report_id"] = f"sim-{node.node_id:06d}-{node.seq:08d}"
    body["host"]["uptime_s"] = max(0.0, (now - (node.booted_at or now - timedelta(days=30))).total_seconds())
    if not busy:
        for gpu in body["gpus"]:
            gpu.update(
                utilization_pct=0.0,
                compute_processes=0,
                power_w=95.0,
                sm_clock_mhz=345,
                clock_event_reasons=1,
                memory_used_mib=0,
                temperature_c=32.0,
                hbm_temperature_c=35.0,
            )
    for gpu in body["gpus"]:
        gpu["ecc_aggregate_uncorrected"] = node.ecc_uncorrected if gpu["index"] == _fault_gpu(node) else 0
    body["host"]["edac_uncorrected"] = node.edac_uncorrected
    for port in body["ib_ports"]:
        port["counters"]["link_downed"] = node.link_downed
    for signal in node.signals(now):
        apply(body, signal, node, now)
    return body


def _fault_gpu(node: VirtualNode) -> int:
    return node.fault.gpu if node.fault is not None else -1


def apply(body: dict[str, Any], signal: SimFault, node: VirtualNode, now: datetime) -> None:
    kind, gpus = signal.fault.signature, body["gpus"]
    gpu = next((g for g in gpus if g["index"] == signal.gpu), None)
    if signal.xid is not None and not signal.announced:
        body.setdefault("xid_events", []).append(
            make_xid(signal.xid, gpu=signal.gpu, observed_at=now, kmsg_seq=10_000 + node.seq)
        )
        signal.announced = True
    if kind == F.XID and not signal.fault.noise and gpu is not None:
        if signal.xid == 79:  # fallen off the bus: NVML no longer sees it
            gpus.remove(gpu)
        else:
            gpu["recovery_action"] = 1  # NVML: a GPU reset is wanted
    elif kind == F.ROW_REMAP and gpu is not None:
        gpu.update(remapped_rows_pending=True, remapped_rows_uncorrectable=1, ecc_volatile_uncorrected=1)
    elif kind == F.THERMAL and gpu is not None:
        gpu.update(temperature_c=91.0 if not signal.fault.noise else 88.5, clock_event_reasons=HW_THERMAL)
    elif kind == F.IB_DOWN:
        port = body["ib_ports"][signal.hca % len(body["ib_ports"])]
        port.update(state="DOWN", phys_state="Polling", rate_gbps=None)
    elif kind == F.EDAC:
        body["host"]["edac_uncorrected"] = max(1, node.edac_uncorrected)
    elif kind == F.DISK:
        body["host"]["disks"] = [{"device": "nvme0n1", "healthy": False, "detail": "SMART overall-health: FAILED"}]


def on_fault(node: VirtualNode, signal: SimFault) -> None:
    """The counters a fault moves when it happens."""
    kind = signal.fault.signature
    if kind == F.ROW_REMAP:
        node.ecc_uncorrected += 1
    elif kind == F.EDAC:
        node.edac_uncorrected += 1
    elif kind == F.IB_DOWN:
        node.link_downed += 1


def check_result(node: VirtualNode, kind: str, now: datetime, rng: random.Random) -> dict[str, Any]:
    """The agent's answer to one active check: GPU defects fail DCGM diagnostics and the stress test."""
    broken = node.fault is not None and node.fault.fault.signature in GPU_FAIL_KINDS
    started = (now - timedelta(minutes=10)).isoformat()
    result: dict[str, Any] = {
        "status": "passed",
        "summary": "",
        "figures": {},
        "output": "",
        "started_at": started,
        "finished_at": now.isoformat(),
    }
    if kind == "gpu_stress":
        per_gpu = {f"gpu{i}_tflops": round(rng.uniform(690, 735), 1) for i in range(8)}
        if broken:
            per_gpu[f"gpu{node.fault.gpu}_tflops"] = 0.0
        result.update(
            figures={**per_gpu, "min_tflops": min(per_gpu.values())},
            summary="8 GPUs stressed" if not broken else f"GPU {node.fault.gpu} failed under stress",
            status="failed" if broken else "passed",
        )
    elif kind == "dcgm_diag":
        result.update(
            figures={"tests_passed": 8.0 if broken else 9.0, "tests_failed": 1.0 if broken else 0.0},
            summary="dcgmi diag -r 2: " + ("FAIL" if broken else "pass"),
            status="failed" if broken else "passed",
        )
    elif kind == "nccl_test":
        result.update(figures={"busbw_gbps": round(rng.uniform(355, 370), 1)}, summary="all_reduce_perf -g 8")
    else:
        result.update(figures={"bytes_tested": 7.2e11, "mismatches": 0.0}, summary="memory pattern test")
    return result
