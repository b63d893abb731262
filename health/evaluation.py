"""Health rule evaluation over a batch of ingested reports.

Contract with telemetry ingest: ``telemetry`` calls ``evaluate_reports`` inside the
ingest transaction (in a savepoint) with one ReportContext per newly stored report,
in the order the reports were taken. ``previous_*`` hold the node's latest state
*before* this report, so rules can take deltas of cumulative counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from telemetry.schema import AgentReport


@dataclass
class ReportContext:
    node_id: int
    hostname: str
    hardware_profile_id: int | None
    expected_gpu_count: int | None  # from the node's hardware profile
    report: AgentReport
    previous_report_at: datetime | None = None  # collected_at of the previous report
    # gpu index -> GpuReading fields (same names) as of the previous report
    previous_gpus: dict[int, dict[str, Any]] = field(default_factory=dict)
    # (device, port) -> {"state", "phys_state", "rate_gbps", "counters": {...}}
    previous_ib_ports: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    previous_host: dict[str, Any] | None = None  # HostVitals fields
    source: str = "agent"  # "agent" or "dcgm-exporter"


def evaluate_reports(contexts: list[ReportContext]) -> None:
    """Run every enabled health rule over the batch (placeholder until the rules land)."""
    return None
