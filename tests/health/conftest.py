"""Fixtures for the health tests: nodes, agent reports built from the wire schema, contexts."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from health import ruleconfig, xid
from health.evaluation import ReportContext, evaluate_reports
from telemetry.schema import AgentReport
from tests.factories import HardwareProfileFactory, NodeFactory

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_caches():
    """The rule and XID caches live in-process; a rolled-back test must not leak its edits."""
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()
    yield
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


@pytest.fixture
def node(db):
    return NodeFactory(hostname="gpu-a01.dc1.example.com", hardware_profile=HardwareProfileFactory())


def gpu(index: int = 0, **fields: Any) -> dict[str, Any]:
    """A healthy H100 reading (real nvidia-smi limits), with ``fields`` changed."""
    base = {
        "index": index,
        "uuid": f"GPU-0000000{index}-f55a-92a8-aa39-322198e72ed6",
        "pci_bus_id": f"00000000:{0x53 + index * 0x10:02X}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "temperature_c": 41.0,
        "hbm_temperature_c": 48.0,
        "max_operating_temp_c": 87.0,
        "hbm_max_operating_temp_c": 95.0,
        "utilization_pct": 97.0,
        "clock_event_reasons": 0,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "nvlink_links_total": 18,
        "nvlink_links_up": 18,
        "nvlink_crc_errors": 0,
        "nvlink_replay_errors": 0,
        "nvlink_recovery_errors": 0,
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "pcie_max_link_gen": 5,
        "pcie_max_link_width": 16,
        "pcie_replay_count": 0,
        "recovery_action": 0,
    }
    return {**base, **fields}


def ib_port(device: str = "mlx5_0", port: int = 1, **fields: Any) -> dict[str, Any]:
    base = {
        "device": device,
        "port": port,
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "link_layer": "InfiniBand",
        "counters": {"symbol_error": 0, "port_rcv_errors": 0, "link_error_recovery": 0, "link_downed": 0},
    }
    return {**base, **fields}


def report(at: datetime = T0, *, gpus: list[dict] | None = None, **fields: Any) -> AgentReport:
    data = {
        "report_id": f"r-{at.timestamp():.0f}-{id(fields)}",
        "hostname": "gpu-a01.dc1.example.com",
        "collected_at": at.isoformat(),
        "gpus": [gpu(i) for i in range(8)] if gpus is None else gpus,
        **fields,
    }
    return msgspec.convert(data, AgentReport)


def context(node, rep: AgentReport, previous: AgentReport | None = None, **fields: Any) -> ReportContext:
    """The context telemetry would build: ``previous`` is the node's report before this one."""
    prev_fields: dict[str, Any] = {}
    if previous is not None:
        prev_fields = {
            "previous_report_at": previous.collected_at,
            "previous_gpus": {g.index: msgspec.structs.asdict(g) for g in previous.gpus},
            "previous_ib_ports": {
                (p.device, p.port): {
                    "state": p.state,
                    "phys_state": p.phys_state,
                    "rate_gbps": p.rate_gbps,
                    "counters": dict(p.counters),
                }
                for p in previous.ib_ports
            },
            "previous_host": msgspec.structs.asdict(previous.host) if previous.host else None,
        }
    base = {
        "node_id": node.pk,
        "hostname": node.hostname,
        "hardware_profile_id": node.hardware_profile_id,
        "expected_gpu_count": node.hardware_profile.gpu_count,
        "report": rep,
    }
    return ReportContext(**{**base, **prev_fields, **fields})


class Feed:
    """Sends a node's reports through evaluation in order, as ingest would, remembering the last one."""

    def __init__(self, node) -> None:
        self.node, self.last = node, None

    def send(self, rep: AgentReport, **fields: Any) -> None:
        evaluate_reports([context(self.node, rep, self.last, **fields)])
        self.last = rep


@pytest.fixture
def feed(node):
    return Feed(node)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


class ThrowawayAlertmanager:
    """A real Prometheus Alertmanager (Debian's prometheus-alertmanager) on a free loopback port,
    clustering off, routing everything to a receiver that notifies nobody. Each test gets its
    own (about 1 s to start): tests restart it, and xdist workers' alert ids must not meet."""

    CONFIG = 'route: {receiver: "nobody"}\nreceivers:\n  - name: "nobody"\n'

    def __init__(self, binary: str, folder: Path) -> None:
        self.binary, self.folder = binary, folder
        (folder / "am.yml").write_text(self.CONFIG)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start it with a fresh, empty storage folder: it knows no alert."""
        self.starts += 1
        log = (self.folder / f"am-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.folder / 'am.yml'}",
                f"--storage.path={self.folder / f'data-{self.starts}'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1):  # noqa: S310 - our own http:// URL
                    return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"Alertmanager did not start: {(self.folder / f'am-{self.starts}.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (active, silenced, inhibited: every alert not yet ended), filtered by labels."""
        query = "&".join(f"filter={urllib.parse.quote(f'{k}={json.dumps(v)}')}" for k, v in labels.items())
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=5) as response:  # noqa: S310 - ours
            return json.loads(response.read())


@pytest.fixture
def alertmanager(tmp_path, settings):
    """A fresh Alertmanager that Nodewarden pushes to (NODEWARDEN_ALERTMANAGER_URL), and Celery
    eager so the push queued on commit runs in the test. bin/test installs the Debian package;
    without it the test skips, and fails in CI."""
    from nodewarden.celery import app as celery_app
    from tests.conftest import IN_CI

    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        if IN_CI:
            pytest.fail("prometheus-alertmanager is required in CI (bin/test installs it)")
        pytest.skip("prometheus-alertmanager is not installed; bin/test installs it")
    server = ThrowawayAlertmanager(binary, tmp_path)
    server.start()
    settings.NODEWARDEN_ALERTMANAGER_URLS = [server.url]
    celery_app.conf.task_always_eager = True
    try:
        yield server
    finally:
        celery_app.conf.task_always_eager = False
        server.stop()
