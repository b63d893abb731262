"""Host vitals a node offers without extra daemons: EDAC memory errors, /proc figures,
disk health where smartctl exists, and whether the workload scheduler's node daemon
(slurmd or kubelet) answers. Every source is injectable and every part optional: a
missing tool gives ``None`` ("not reported"), never a failed report."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import Contribution
from .kmsg import Runner, run_command

EDAC_ROOT = Path("/sys/devices/system/edac/mc")
PROC_ROOT = Path("/proc")
KUBELET_HEALTHZ = "http://127.0.0.1:10248/healthz"
COMMAND_TIMEOUT_S = 10.0


def _int_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def edac_counts(root: Path) -> tuple[int | None, int | None]:
    """Sum of ce_count / ue_count over the memory controllers, None without EDAC."""
    controllers = sorted(root.glob("mc[0-9]*")) if root.is_dir() else []
    ce = [_int_file(mc / "ce_count") for mc in controllers]
    ue = [_int_file(mc / "ue_count") for mc in controllers]
    known_ce, known_ue = [v for v in ce if v is not None], [v for v in ue if v is not None]
    return (sum(known_ce) if known_ce else None, sum(known_ue) if known_ue else None)


def proc_vitals(root: Path) -> dict[str, Any]:
    vitals: dict[str, Any] = {}
    try:
        vitals["uptime_s"] = float((root / "uptime").read_text().split()[0])
        vitals["load1"] = float((root / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        meminfo = dict(re.findall(r"^(\w+):\s+(\d+) kB", (root / "meminfo").read_text(), re.MULTILINE))
    except OSError:
        meminfo = {}
    for key, field in (("MemTotal", "memory_total_mib"), ("MemAvailable", "memory_available_mib")):
        if key in meminfo:
            vitals[field] = int(meminfo[key]) // 1024
    return vitals


def _smart_verdict(stdout: str) -> tuple[bool | None, str]:
    try:
        status = json.loads(stdout).get("smart_status", {})
        if "passed" in status:
            return bool(status["passed"]), "PASSED" if status["passed"] else "FAILED"
    except ValueError:
        pass
    # smartctl before 7.0 has no -j: ATA "... test result: PASSED", SCSI "SMART Health Status: OK".
    if re.search(r"test result: PASSED|Health Status: OK", stdout):
        return True, "PASSED"
    if re.search(r"test result: FAILED|Health Status: (?!OK)", stdout):
        return False, "FAILED"
    return None, "smartctl gave no verdict"


class HostCollector:
    """Collects HostVitals; ``runner``/``which``/``http_get`` stand in for the system in tests."""

    name = "host"

    def __init__(
        self,
        edac_root: Path = EDAC_ROOT,
        proc_root: Path = PROC_ROOT,
        runner: Runner = run_command,
        which: Callable[[str], str | None] = shutil.which,
        http_get: Callable[[str, float], str] | None = None,
    ):
        self.edac_root, self.proc_root = Path(edac_root), Path(proc_root)
        self.runner, self.which = runner, which
        self.http_get = http_get or _http_get

    def commit(self) -> None:
        """Nothing to move: read fresh each cycle."""

    def collect(self) -> Contribution:
        notes: dict[str, str] = {}
        corrected, uncorrected = edac_counts(self.edac_root)
        host: dict[str, Any] = {"edac_corrected": corrected, "edac_uncorrected": uncorrected}
        host.update(proc_vitals(self.proc_root))
        host["disks"] = self._disks(notes)
        host["scheduler"] = self._scheduler()
        return Contribution(fields={"host": {k: v for k, v in host.items() if v is not None}}, notes=notes)

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str] | None:
        try:
            return self.runner(argv, timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None

    def _disks(self, notes: dict[str, str]) -> list[dict[str, Any]]:
        if not self.which("smartctl"):
            return []
        scan = self._run(["smartctl", "--scan", "-j"])
        try:
            devices = [d["name"] for d in json.loads(scan.stdout).get("devices", [])] if scan else []
        except (ValueError, KeyError, TypeError):
            notes["host.smartctl"] = "smartctl --scan -j gave no device list"
            return []
        return [self._disk(name) for name in devices]

    def _disk(self, device: str) -> dict[str, Any]:
        done = self._run(["smartctl", "-H", "-j", device])
        if done is None:
            return {"device": device, "healthy": None, "detail": "smartctl timed out"}
        healthy, detail = _smart_verdict(done.stdout)
        return {"device": device, "healthy": healthy, "detail": detail}

    def _scheduler(self) -> dict[str, Any]:
        if self.which("slurmd"):
            return self._slurmd()
        if self.which("kubelet"):
            return self._kubelet()
        return {"kind": "none"}

    def _slurmd(self) -> dict[str, Any]:
        # "scontrol show slurmd" asks the local slurmd itself (not slurmctld) for its status.
        argv = ["scontrol", "show", "slurmd"] if self.which("scontrol") else ["systemctl", "is-active", "slurmd"]
        done = self._run(argv)
        if done is None:
            return {"kind": "slurm", "daemon": "slurmd", "responsive": False, "detail": f"{argv[0]} timed out"}
        detail = (done.stdout if done.returncode == 0 else done.stderr or done.stdout).strip()
        return {
            "kind": "slurm",
            "daemon": "slurmd",
            "responsive": done.returncode == 0,
            "detail": detail.splitlines()[0][:200] if detail else "",
        }

    def _kubelet(self) -> dict[str, Any]:
        try:
            body = self.http_get(KUBELET_HEALTHZ, COMMAND_TIMEOUT_S).strip()
        except OSError as exc:
            return {"kind": "kubernetes", "daemon": "kubelet", "responsive": False, "detail": str(exc)[:200]}
        return {"kind": "kubernetes", "daemon": "kubelet", "responsive": body == "ok", "detail": body[:200]}


def _http_get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - only KUBELET_HEALTHZ, a constant http:// URL
        return response.read(1024).decode(errors="replace")
