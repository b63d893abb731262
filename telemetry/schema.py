"""The node agent's report: the wire contract between agent/ and the portal's ingest.

Validated with msgspec on the hot path: decoding and validation are one C pass, and a
bad report fails with a message that names the exact field (``Expected `int`, got
`str` - at `$.gpus[0].index```). Unknown fields are refused (``forbid_unknown_fields``)
so a typo in an agent never passes silently as "not reported".

``None`` always means "this GPU or node does not report it" (an older GPU, a
metric the driver does not offer, a collector that failed), never zero.
Counters (ECC, NVLink, PCIe replay, InfiniBand) are cumulative as the hardware
counts them; the portal takes deltas between reports and handles resets.

Schema version 1. docs/report-format.md documents it with a full example; the OpenAPI
document shows this very definition (msgspec's JSON Schema, see nodewarden/openapi.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from nodewarden.bounds import BIGINT_MAX, BIGINT_MIN, INT_MAX

SCHEMA_VERSION: Final = 1
MAX_REPORTS_PER_REQUEST = 500
MAX_GPUS = 64
MAX_XID_EVENTS = 1000

# Every integer is bounded by the column it lands in, so that 2**63 is a 400 naming the field
# rather than a database error: counters are BigIntegerField (telemetry.models._count); clocks and
# memory are 32-bit and PCIe link figures 16-bit in the sample history (telemetry.models._int, _small).
Count = Annotated[int, msgspec.Meta(ge=0, le=BIGINT_MAX)]
Count32 = Annotated[int, msgspec.Meta(ge=0, le=INT_MAX)]
Count16 = Annotated[int, msgspec.Meta(ge=0, le=32_767)]
Celsius = Annotated[float, msgspec.Meta(ge=-50, le=200)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=10_000)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Text = Annotated[str, msgspec.Meta(max_length=200)]
AwareTime = Annotated[datetime, msgspec.Meta(tz=True)]  # a naive timestamp is refused
# msgspec takes offsets up to ±23:59; no clock is past +14:00 and PostgreSQL refuses past
# ±15:59 (nodewarden.bounds.MAX_UTC_OFFSET), so telemetry.ingest.vet_reports refuses more (a 400 naming the field).


class Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base: unknown fields are an error, absent optional fields are None."""


class GpuReading(Strict, frozen=True):  # type: ignore[misc]  # msgspec allows it; mypy reads it as a dataclass
    """One GPU's health as NVML reports it at ``AgentReport.collected_at``."""

    index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS)]
    uuid: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    pci_bus_id: Text = ""  # "00000000:53:00.0", as NVML and the kernel log spell it
    name: Text = ""  # "NVIDIA H100 80GB HBM3"
    serial: Text | None = None
    vbios_version: Text | None = None
    persistence_mode: bool | None = None
    # Temperatures and the GPU's own limits (nvidia-smi -q "Max Operating", "Slowdown", "Shutdown").
    temperature_c: Celsius | None = None
    hbm_temperature_c: Celsius | None = None
    max_operating_temp_c: Celsius | None = None
    hbm_max_operating_temp_c: Celsius | None = None
    slowdown_temp_c: Celsius | None = None
    shutdown_temp_c: Celsius | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: Count32 | None = None
    mem_clock_mhz: Count | None = None
    clock_event_reasons: Count | None = None  # NVML/DCGM bitmask: 0x8 HW_SLOWDOWN, 0x40 HW_THERMAL, ...
    utilization_pct: Percent | None = None
    memory_used_mib: Count32 | None = None
    memory_total_mib: Count | None = None
    # Running compute processes: >0 means a job is using the GPU. Summed over at most MAX_GPUS
    # GPUs into NodeHealth.gpu_compute_processes, a PositiveIntegerField.
    compute_processes: Annotated[int, msgspec.Meta(ge=0, le=INT_MAX // MAX_GPUS)] | None = None
    # ECC: volatile = since the driver loaded, aggregate = lifetime.
    ecc_volatile_corrected: Count | None = None
    ecc_volatile_uncorrected: Count | None = None
    ecc_aggregate_corrected: Count | None = None
    ecc_aggregate_uncorrected: Count | None = None
    # Dynamic page retirement (pre-Ampere; still reported by some drivers on newer GPUs).
    retired_pages_sbe: Count | None = None
    retired_pages_dbe: Count | None = None
    retired_pages_pending: bool | None = None
    # Row remapping (A100 and newer).
    remapped_rows_correctable: Count | None = None
    remapped_rows_uncorrectable: Count | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # NVLink: link counts and error counters summed over the GPU's links.
    nvlink_links_total: Count | None = None
    nvlink_links_up: Count | None = None
    nvlink_crc_errors: Count | None = None
    nvlink_replay_errors: Count | None = None
    nvlink_recovery_errors: Count | None = None
    # PCIe: current vs maximum link, and the replay counter.
    pcie_link_gen: Count16 | None = None
    pcie_link_width: Count16 | None = None
    pcie_max_link_gen: Count | None = None
    pcie_max_link_width: Count | None = None
    pcie_replay_count: Count | None = None
    # nvmlGpuRecoveryAction: 0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P, 4 DRAIN_AND_RESET.
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=4)] | None = None

    def get(self, name: str, default: Any = None) -> Any:
        """A field by its name, as of a mapping: the rules read a node's previous readings
        (``ReportContext.previous_gpus``) as they read a test's dict of the same names."""
        return getattr(self, name, default)


class XidEvent(Strict):
    """One NVRM Xid (GPU) or SXid (NVSwitch) line from the kernel log."""

    xid: Annotated[int, msgspec.Meta(ge=0, le=100_000)]
    observed_at: AwareTime  # the kernel's timestamp for the line, converted to wall-clock UTC
    raw: Annotated[str, msgspec.Meta(max_length=2000)]  # the line as the kernel printed it
    kind: Literal["xid", "sxid"] = "xid"
    pci_bus_id: Text | None = None  # "0000:53:00" from "NVRM: Xid (PCI:0000:53:00): 79, ..."
    pid: Annotated[int, msgspec.Meta(ge=BIGINT_MIN, le=BIGINT_MAX)] | None = (
        None  # "pid=1234"; None where the driver printed "pid='<unknown>'"
    )
    process: Text | None = None  # "name=python3"
    message: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    kmsg_seq: Count | None = None  # /dev/kmsg sequence number: the agent's resume cursor
    # XID 154 only: the nvmlGpuRecoveryAction_t the line changes to ("... to 0x2 (Node Reboot
    # Required)"): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset; newer
    # drivers add values, so any small number is accepted and an unknown one is inspected.
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=255)] | None = None


class IbPortReading(Strict):
    """One InfiniBand HCA port from /sys/class/infiniband/<device>/ports/<port>/."""

    device: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]  # "mlx5_0"
    port: Annotated[int, msgspec.Meta(ge=0, le=255)]
    state: Text = ""  # from "4: ACTIVE" -> "ACTIVE"
    phys_state: Text = ""  # from "5: LinkUp" -> "LinkUp"
    rate_gbps: Annotated[float, msgspec.Meta(ge=0)] | None = None  # from "400 Gb/sec (4X NDR)"
    link_layer: Text | None = None  # "InfiniBand" or "Ethernet"
    counters: dict[str, Count] = {}  # counters/ and hw_counters/ file name -> value


class DiskHealth(Strict):
    device: Text
    healthy: bool | None = None  # smartctl -H verdict; None when smartctl is absent or cannot tell
    detail: Text = ""


class SchedulerDaemon(Strict):
    kind: Literal["slurm", "kubernetes", "none"] = "none"
    daemon: Text = ""  # "slurmd", "kubelet"
    responsive: bool | None = None
    detail: Text = ""


class HostVitals(Strict):
    """What the host offers without extra daemons."""

    edac_corrected: Count | None = None  # sum of /sys/devices/system/edac/mc/mc*/ce_count
    edac_uncorrected: Count | None = None  # ... ue_count
    disks: list[DiskHealth] = []
    scheduler: SchedulerDaemon | None = None
    uptime_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    load1: Annotated[float, msgspec.Meta(ge=0)] | None = None
    memory_total_mib: Count | None = None
    memory_available_mib: Count | None = None


class AgentReport(Strict):
    """Everything one agent saw at one instant. ``report_id`` makes resending safe."""

    report_id: Annotated[str, msgspec.Meta(min_length=8, max_length=64)]
    hostname: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    collected_at: AwareTime
    schema: Literal[1] = SCHEMA_VERSION
    seq: Count = 0  # per-agent counter, persisted across agent restarts
    # /proc/sys/kernel/random/boot_id of the boot the report was taken in: with an event's
    # kmsg_seq it names one kernel record, however often a restarted agent resends it.
    boot_id: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    agent_version: Text = ""
    driver_version: Text | None = None
    cuda_version: Text | None = None
    nvml_version: Text | None = None
    gpus: Annotated[list[GpuReading], msgspec.Meta(max_length=MAX_GPUS)] = []
    xid_events: Annotated[list[XidEvent], msgspec.Meta(max_length=MAX_XID_EVENTS)] = []
    ib_ports: list[IbPortReading] = []
    host: HostVitals | None = None
    # collector name -> error text, e.g. {"nvml": "NVML_ERROR_DRIVER_NOT_LOADED"}: a collector
    # that failed says so instead of sending zeros.
    collector_errors: dict[str, Annotated[str, msgspec.Meta(max_length=2000)]] = {}


class ReportBatch(Strict):
    """The body of ``POST /api/agent/reports/``: one or more reports in the order they were
    taken (an agent flushing its on-disk buffer after an outage sends many at once)."""

    reports: Annotated[list[AgentReport], msgspec.Meta(min_length=1, max_length=MAX_REPORTS_PER_REQUEST)]


_batch_decoder = msgspec.json.Decoder(ReportBatch)
# JSON spells U+0000 only as this escape (a raw NUL byte is not valid JSON). PostgreSQL text
# cannot store it, so it is refused here, with a 400, rather than failing in the database.
NUL_ESCAPE = b"\\u0000"
NUL_MESSAGE = "Strings may not contain a NUL character (\\u0000): it cannot be stored"


def refuse_nul(body: bytes) -> None:
    """Raise ``msgspec.ValidationError`` if any JSON string in ``body`` holds U+0000, without a parse.
    A body without a backslash has no escape at all: one memchr (0.2 µs for a 10 kB report) rather
    than the substring search (4 µs), which runs only where there are escapes."""
    if b"\\" in body and NUL_ESCAPE in body:
        raise msgspec.ValidationError(NUL_MESSAGE)


def decode_batch(body: bytes) -> list[AgentReport]:
    """Decode and validate a request body. Raises ``msgspec.ValidationError`` or
    ``msgspec.DecodeError`` with a message naming the offending field."""
    refuse_nul(body)
    try:
        return _batch_decoder.decode(body).reports
    except UnicodeDecodeError as exc:  # msgspec lets invalid UTF-8 inside a string escape as this
        raise msgspec.DecodeError(f"JSON is malformed: a string is not valid UTF-8 ({exc.reason})") from None
