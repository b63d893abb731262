"""dcgm-exporter's Prometheus text output as agent reports, pushed or scraped.

Operators who already run dcgm-exporter need no agent: each host's GPU metrics become
one ``AgentReport`` (source "dcgm-exporter") and take the ingest road like any other.

Vendor quirks handled here (see shared/reference/domain-facts.md §2):
- the host label is ``Hostname`` before dcgm-exporter d5e5f51 and ``hostname`` after;
- values from 0x7ffffffffffffff0 up (and DCGM's float blank 2^47) mean "not supported";
- DCGM_FI_DEV_XID_ERRORS holds the *last XID number*, not a count: a new XID is visible
  only as a change of the gauge, so one XidEvent is emitted per change;
- metrics outside the GPU reading schema (profiling, NVSwitch, CPU) are not ours to store.
"""

from __future__ import annotations

import hashlib
import math
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import msgspec
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Lower
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from nodes.models import Node

from .ingest import IngestRefused, ingest_reports
from .models import DcgmExporterTarget, GpuState, IngestRejection
from .schema import AgentReport, GpuReading, XidEvent

SOURCE = "dcgm-exporter"
BLANK_FROM = 2**47  # DCGM_FP64_BLANK; every int64 blank (0x7ffffffffffffff0 and up) is larger
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"

# DCGM field -> (GpuReading field, type). Summed fields add up per-link series.
FIELDS: dict[str, tuple[str, type]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", float),
    "DCGM_FI_DEV_MEMORY_TEMP": ("hbm_temperature_c", float),
    "DCGM_FI_DEV_GPU_MAX_OP_TEMP": ("max_operating_temp_c", float),
    "DCGM_FI_DEV_MEM_MAX_OP_TEMP": ("hbm_max_operating_temp_c", float),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("slowdown_temp_c", float),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": ("shutdown_temp_c", float),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", float),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", float),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", int),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", int),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", int),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", int),
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", float),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", int),
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total_mib", int),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_volatile_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_volatile_uncorrected", int),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_aggregate_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_aggregate_uncorrected", int),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", int),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", int),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", bool),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", int),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", int),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remapped_rows_pending", bool),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remapped_rows_failure", bool),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_crc_errors", int),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_crc_errors", int),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_replay_errors", int),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_recovery_errors", int),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay_count", int),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_link_gen", int),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_link_width", int),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_max_link_gen", int),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_max_link_width", int),
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": ("recovery_action", int),
}
SUMMED = {"nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors"}


class ExpositionError(ValueError):
    """The text is not a Prometheus exposition, or a value breaks the report schema."""


@dataclass
class HostMetrics:
    """One host's GPUs as read from the exposition."""

    host: str
    driver_version: str | None = None
    gpus: dict[int, dict[str, Any]] = field(default_factory=dict)
    xid_gauges: dict[int, int] = field(default_factory=dict)
    xid_lines: dict[int, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """What a push or scrape stored: reports accepted, and hosts that match no node."""

    accepted: int = 0
    duplicates: int = 0
    hosts: list[str] = field(default_factory=list)
    unknown_hosts: list[str] = field(default_factory=list)


def _value(raw: float) -> float | None:
    if raw is None or math.isnan(raw) or raw >= BLANK_FROM:
        return None
    return raw


def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value:g}"


def parse_exposition(text: str, *, default_host: str = "") -> dict[str, HostMetrics]:
    """Group an exposition's GPU samples by host, then by GPU index."""
    hosts: dict[str, HostMetrics] = {}
    if "\x00" in text:  # PostgreSQL text cannot store it; refuse it as bad input
        raise ExpositionError("The exposition contains a NUL character, which cannot be stored")
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ExpositionError(f"Not a Prometheus text exposition: {exc}") from exc
    for family in families:
        for sample in family.samples:
            # The parser names a counter's samples "<family>_total"; DCGM's own names never end so.
            name = sample.name.removesuffix("_total")
            if (name not in FIELDS and name != XID_GAUGE) or "gpu" not in sample.labels:
                continue  # not a per-GPU field of the report schema (profiling, NVSwitch, CPU)
            labels = sample.labels
            host = labels.get("hostname") or labels.get("Hostname") or default_host
            metrics = hosts.setdefault(host, HostMetrics(host=host))
            _add_sample(metrics, name, labels, sample.value)
    return hosts


def _add_sample(metrics: HostMetrics, name: str, labels: dict[str, str], raw: float) -> None:
    if not labels["gpu"].isdigit():
        raise ExpositionError(f"{name}: label gpu={labels['gpu']!r} is not a GPU index")
    index = int(labels["gpu"])
    gpu = metrics.gpus.setdefault(index, {"index": index})
    gpu.setdefault("uuid", labels.get("UUID") or labels.get("uuid") or "")
    gpu.setdefault("pci_bus_id", labels.get("pci_bus_id", ""))
    gpu.setdefault("name", labels.get("modelName", ""))
    metrics.driver_version = metrics.driver_version or labels.get("DCGM_FI_DRIVER_VERSION")
    value = _value(raw)
    if name == XID_GAUGE:
        if value is not None:
            metrics.xid_gauges[index] = int(value)
            metrics.xid_lines[index] = _line(name, labels, raw)
        return
    target, kind = FIELDS[name]
    if value is None:
        gpu.setdefault(target, None)
        return
    typed = kind(value) if kind is not bool else value != 0
    if target in SUMMED and gpu.get(target) is not None:
        typed = gpu[target] + typed
    gpu[target] = typed


def to_report(metrics: HostMetrics, *, collected_at: datetime, previous_xids: dict[int, int | None]) -> AgentReport:
    """The host as an AgentReport; an XID gauge that changed becomes one XidEvent."""
    try:
        gpus = [msgspec.convert(g, GpuReading) for _, g in sorted(metrics.gpus.items())]
    except msgspec.ValidationError as exc:
        raise ExpositionError(f"host {metrics.host!r}: {exc}") from exc
    events = []
    for index, xid in sorted(metrics.xid_gauges.items()):
        if xid != 0 and xid != previous_xids.get(index):
            events.append(
                XidEvent(
                    xid=xid,
                    observed_at=collected_at,
                    raw=metrics.xid_lines[index][:2000],
                    pci_bus_id=metrics.gpus[index].get("pci_bus_id") or None,
                    message=f"{XID_GAUGE} gauge changed to {xid}",
                )
            )
    key = hashlib.sha1(f"{metrics.host}|{collected_at.isoformat()}".encode(), usedforsecurity=False).hexdigest()[:24]
    return AgentReport(
        report_id=f"dcgm-{key}",
        hostname=metrics.host,
        collected_at=collected_at,
        agent_version="dcgm-exporter",
        driver_version=metrics.driver_version,
        gpus=gpus,
        xid_events=events,
    )


def ingest_exposition(text: str, *, source: str = SOURCE, default_host: str = "", remote_addr: str = "") -> Outcome:
    """Store every known host's GPUs from one exposition; unknown hosts are recorded.

    All hosts or none: a value that breaks the schema refuses the whole exposition.
    """
    collected_at = timezone.now()
    parsed = parse_exposition(text, default_host=default_host)
    for metrics in parsed.values():
        if any(not g["uuid"] for g in metrics.gpus.values()):
            raise ExpositionError(f"host {metrics.host!r}: a GPU has no UUID label")
    nodes = _nodes_by_host(parsed)
    outcome = Outcome(unknown_hosts=sorted(h for h in parsed if h.lower() not in nodes))
    with transaction.atomic():
        previous = _previous_xids(list(nodes.values()))
        for host in sorted(parsed):
            node_id = nodes.get(host.lower())
            if node_id is not None:
                _ingest_host(parsed[host], node_id, collected_at, previous.get(node_id, {}), outcome)
        if outcome.unknown_hosts:
            _record_unknown(outcome.unknown_hosts, text, source, remote_addr)
    return outcome


def _nodes_by_host(parsed: dict[str, HostMetrics]) -> dict[str, int]:
    names = [h.lower() for h in parsed]
    rows = Node.objects.annotate(lower=Lower("hostname")).filter(lower__in=names).values_list("lower", "id")
    return dict(rows)


def _previous_xids(node_ids: list[int]) -> dict[int, dict[int, int | None]]:
    previous: dict[int, dict[int, int | None]] = defaultdict(dict)
    for node_id, index, gauge in GpuState.objects.filter(node_id__in=node_ids).values_list(
        "node_id", "index", "xid_gauge"
    ):
        previous[node_id][index] = gauge
    return previous


def _ingest_host(
    metrics: HostMetrics, node_id: int, collected_at: datetime, previous: dict[int, int | None], outcome: Outcome
) -> None:
    report = to_report(metrics, collected_at=collected_at, previous_xids=previous)
    try:
        result = ingest_reports(node_id, [report], source=SOURCE)
    except IngestRefused as exc:
        raise ExpositionError(f"host {metrics.host!r}: {exc}") from exc
    outcome.accepted += result.accepted
    outcome.duplicates += result.duplicates
    outcome.hosts.append(metrics.host)
    for index, gauge in metrics.xid_gauges.items():
        if previous.get(index) != gauge:
            GpuState.objects.filter(node_id=node_id, index=index).update(xid_gauge=gauge)


def _record_unknown(hosts: list[str], text: str, source: str, remote_addr: str) -> None:
    listed = ", ".join(hosts)
    IngestRejection.objects.create(
        source=source,
        hostname=hosts[0][:253],
        status=200,
        remote_addr=remote_addr[:64],
        reason=f"{len(hosts)} host(s) match no node, their metrics were not stored: {listed}"[:2000],
        body_excerpt=text[:2048],
        body_size=len(text),
    )


def scrape_target(target: DcgmExporterTarget) -> Outcome | None:
    """Fetch one exporter's /metrics and ingest it; the error, if any, lands on the target
    (``last_error``) and in an IngestRejection. Returns None on failure."""
    limit = settings.TELEMETRY_MAX_BODY_BYTES
    try:
        # The URL is an operator's DcgmExporterTarget (URLField: http(s)/ftp(s), never file:).
        with urllib.request.urlopen(target.url, timeout=target.timeout_s) as response:  # noqa: S310 - see the comment above
            body = response.read(limit + 1)
        if len(body) > limit:
            raise ExpositionError(f"exposition larger than {limit} bytes")
        outcome = ingest_exposition(
            body.decode("utf-8", "replace"), source="dcgm-scrape", default_host=urlparse(target.url).hostname or ""
        )
    except (OSError, ExpositionError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        DcgmExporterTarget.objects.filter(pk=target.pk).update(last_error=error)
        IngestRejection.objects.create(source="dcgm-scrape", status=0, reason=f"{target.url}: {error}"[:2000])
        return None
    DcgmExporterTarget.objects.filter(pk=target.pk).update(last_error="")
    return outcome
