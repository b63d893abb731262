"""Realistic agent reports for tests, the ingest benchmark and the demo.

``make_report`` builds what an HGX H100 8-GPU node's agent sends (JSON-ready dict, the
schema of ``telemetry.schema.AgentReport``): temperatures 35-70 °C, 100-650 W of a 700 W
limit, no ECC or remap errors, 18 NVLinks up, PCIe Gen5 x16. Same seed, same report.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
from typing import Any

# H100 SXM bus ids as NVML prints them on an HGX board.
BUS_IDS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


def _gpu(rng: random.Random, hostname: str, index: int) -> dict[str, Any]:
    load = rng.random()
    ident = random.Random(f"{hostname}/gpu{index}")  # a GPU keeps its UUID and serial from report to report
    return {
        "index": index,
        "uuid": f"GPU-{uuid.UUID(int=ident.getrandbits(128), version=4)}",
        "pci_bus_id": f"00000000:{BUS_IDS[index % len(BUS_IDS)].upper()}:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "serial": f"1654{ident.randrange(10**9):09d}",
        "vbios_version": "96.00.99.00.01",
        "persistence_mode": True,
        "temperature_c": round(35 + 35 * load, 1),
        "hbm_temperature_c": round(38 + 32 * load, 1),
        "max_operating_temp_c": 87.0,
        "hbm_max_operating_temp_c": 95.0,
        "slowdown_temp_c": 90.0,
        "shutdown_temp_c": 92.0,
        "power_w": round(100 + 550 * load, 1),
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980 if load > 0.2 else 345,
        "mem_clock_mhz": 2619,
        "clock_event_reasons": 0 if load > 0.2 else 1,
        "utilization_pct": round(100 * load, 1),
        "memory_used_mib": int(80_000 * load),
        "memory_total_mib": 81_559,
        "compute_processes": 1 if load > 0.2 else 0,
        "ecc_volatile_corrected": 0,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "retired_pages_sbe": 0,
        "retired_pages_dbe": 0,
        "retired_pages_pending": False,
        "remapped_rows_correctable": 0,
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


def make_xid(
    xid: int, *, gpu: int = 0, observed_at: datetime, kmsg_seq: int | None = None, message: str = ""
) -> dict[str, Any]:
    """An XID line as the kernel prints it, for GPU ``gpu`` of the board above."""
    bus = f"0000:{BUS_IDS[gpu % len(BUS_IDS)]}:00"
    message = message or "pid=1234, name=python3, Ch 00000008"
    return {
        "xid": xid,
        "observed_at": observed_at.isoformat(),
        "kind": "xid",
        "pci_bus_id": bus,
        "pid": 1234,
        "process": "python3",
        "message": message,
        "kmsg_seq": kmsg_seq,
        "raw": f"NVRM: Xid (PCI:{bus}): {xid}, {message}",
    }


def make_report(
    hostname: str,
    *,
    collected_at: datetime,
    gpus: int = 8,
    seed: int = 0,
    xid: int | None = None,
    xid_gpu: int = 0,
    seq: int = 0,
) -> dict[str, Any]:
    """One agent report as JSON-ready dict; ``xid`` adds that XID on GPU ``xid_gpu``."""
    rng = random.Random(f"{hostname}/{seed}")
    report: dict[str, Any] = {
        "report_id": f"{hostname}-{seed}-{collected_at.timestamp():.6f}",
        "hostname": hostname,
        "collected_at": collected_at.isoformat(),
        "seq": seq,
        "agent_version": "0.1.0",
        "driver_version": "580.105.08",
        "cuda_version": "13.0",
        "nvml_version": "13.580.105.08",
        "gpus": [_gpu(rng, hostname, i) for i in range(gpus)],
        "ib_ports": [
            {
                "device": f"mlx5_{i}",
                "port": 1,
                "state": "ACTIVE",
                "phys_state": "LinkUp",
                "rate_gbps": 400.0,
                "link_layer": "InfiniBand",
                "counters": {"symbol_error": 0, "link_downed": 0},
            }
            for i in range(8)
        ],
        "host": {
            "edac_corrected": 0,
            "edac_uncorrected": 0,
            "uptime_s": 86_400.0 + seed,
            "load1": 12.5,
            "memory_total_mib": 2_064_000,
            "memory_available_mib": 1_500_000,
        },
    }
    if xid is not None:
        report["xid_events"] = [make_xid(xid, gpu=xid_gpu, observed_at=collected_at, kmsg_seq=1000 + seq)]
    return report


def make_batch(
    hostname: str, *, start: datetime, count: int = 1, every_s: float = 30.0, gpus: int = 8, seed: int = 0
) -> dict[str, Any]:
    """A ReportBatch body: ``count`` reports ``every_s`` seconds apart from ``start``."""
    return {
        "reports": [
            make_report(hostname, collected_at=start + timedelta(seconds=i * every_s), gpus=gpus, seed=seed + i, seq=i)
            for i in range(count)
        ]
    }
