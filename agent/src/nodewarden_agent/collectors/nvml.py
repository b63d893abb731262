"""GPU health through NVML (nvidia-ml-py's ``pynvml``), one GpuReading dict per GPU.

The NVML module is injectable: tests pass an object with the same functions and
constants, built from a real H100's answers. Every call is guarded on its own:
``NVML_ERROR_NOT_SUPPORTED`` means "this GPU does not offer it" and becomes ``None``
quietly; any other error for one field becomes ``None`` plus a note, so one flaky
counter never hides the other forty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import CollectorError, Contribution

log = logging.getLogger(__name__)

# Schema ranges (telemetry/schema.py): a value outside them would get the whole report
# refused, so it is dropped to None with a note instead (NVML answers 0xFFFF on some faults).
_RANGES = {
    "temperature_c": (-50, 200),
    "hbm_temperature_c": (-50, 200),
    "max_operating_temp_c": (-50, 200),
    "hbm_max_operating_temp_c": (-50, 200),
    "slowdown_temp_c": (-50, 200),
    "shutdown_temp_c": (-50, 200),
    "power_w": (0, 10_000),
    "power_limit_w": (0, 10_000),
    "utilization_pct": (0, 100),
    "recovery_action": (0, 4),
}


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class _Reader:
    """Calls NVML functions for one GPU, turning errors into None and notes."""

    def __init__(self, nvml: Any, prefix: str, notes: dict[str, str]):
        self.nvml, self.prefix, self.notes = nvml, prefix, notes

    def is_not_supported(self, exc: BaseException) -> bool:
        return getattr(exc, "value", None) == self.nvml.NVML_ERROR_NOT_SUPPORTED

    def call(self, label: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            return None
        try:
            return _text(fn(*args))
        except self.nvml.NVMLError as exc:
            if not self.is_not_supported(exc):
                self.notes[f"{self.prefix}.{label}"] = str(exc)
            return None


def _cuda_version(raw: int | None) -> str | None:
    # nvmlSystemGetCudaDriverVersion answers 12040 for CUDA 12.4.
    return None if raw is None else f"{raw // 1000}.{(raw % 1000) // 10}"


class NvmlCollector:
    """Reads every GPU's health; ``expected_gpus`` makes a missing GPU a note."""

    name = "nvml"

    def __init__(self, nvml: Any = None, expected_gpus: int | None = None):
        self._nvml = nvml
        self.expected_gpus = expected_gpus

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as exc:
                raise CollectorError(f"nvidia-ml-py is not installed: {exc}") from exc
            self._nvml = pynvml
        return self._nvml

    def collect(self) -> Contribution:
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise CollectorError(f"nvmlInit failed: {exc}") from exc
        try:
            return self._collect(nvml)
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.warning("nvmlShutdown failed: %s", exc)

    def commit(self) -> None:
        """Nothing to move: NVML is read fresh each cycle."""

    def _collect(self, nvml: Any) -> Contribution:
        notes: dict[str, str] = {}
        system = _Reader(nvml, "nvml.system", notes)
        fields: dict[str, Any] = {
            "driver_version": system.call("driver_version", "nvmlSystemGetDriverVersion"),
            "cuda_version": _cuda_version(system.call("cuda_version", "nvmlSystemGetCudaDriverVersion")),
            "nvml_version": system.call("nvml_version", "nvmlSystemGetNVMLVersion"),
        }
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise CollectorError(f"nvmlDeviceGetCount failed: {exc}") from exc
        fields["gpus"] = [gpu for gpu in (self._gpu(nvml, i, notes) for i in range(count)) if gpu]
        self._check_count(count, len(fields["gpus"]), notes)
        return Contribution(fields=fields, notes=notes)

    def _check_count(self, count: int, readable: int, notes: dict[str, str]) -> None:
        if self.expected_gpus is not None and count != self.expected_gpus:
            notes["gpu_count"] = f"expected {self.expected_gpus} GPUs, NVML sees {count}"
        elif readable < count:
            notes["gpu_count"] = f"NVML sees {count} GPUs but only {readable} answered"

    def _gpu(self, nvml: Any, index: int, notes: dict[str, str]) -> dict[str, Any] | None:
        reader = _Reader(nvml, f"nvml.gpu{index}", notes)
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as exc:
            # Without a handle or UUID there is nothing to attach readings to; the note
            # (and gpu_count) tell the portal this GPU went missing, e.g. "GPU is lost".
            notes[f"nvml.gpu{index}"] = f"unreadable: {exc}"
            return None
        gpu: dict[str, Any] = {"index": index, "uuid": uuid}
        for part in (_identity, _thermals, _power_clocks, _memory_ecc, _row_remap, _pcie, _fields):
            gpu.update(part(reader, handle))
        gpu.update(_nvlink(reader, handle))
        return _within_ranges(gpu, reader)


def _identity(r: _Reader, h: Any) -> dict[str, Any]:
    nv = r.nvml
    pci = r.call("pci_bus_id", "nvmlDeviceGetPciInfo", h)
    persistence = r.call("persistence_mode", "nvmlDeviceGetPersistenceMode", h)
    return {
        "pci_bus_id": _text(pci.busId) if pci is not None else "",
        "name": r.call("name", "nvmlDeviceGetName", h) or "",
        "serial": r.call("serial", "nvmlDeviceGetSerial", h),
        "vbios_version": r.call("vbios_version", "nvmlDeviceGetVbiosVersion", h),
        "persistence_mode": None if persistence is None else persistence == nv.NVML_FEATURE_ENABLED,
    }


def _thermals(r: _Reader, h: Any) -> dict[str, Any]:
    nv = r.nvml
    threshold = "nvmlDeviceGetTemperatureThreshold"
    return {
        "temperature_c": r.call("temperature_c", "nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
        "max_operating_temp_c": r.call("max_operating_temp_c", threshold, h, nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        "hbm_max_operating_temp_c": r.call(
            "hbm_max_operating_temp_c", threshold, h, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX
        ),
        "slowdown_temp_c": r.call("slowdown_temp_c", threshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown_temp_c": r.call("shutdown_temp_c", threshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    }


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0  # NVML answers in mW


def _power_clocks(r: _Reader, h: Any) -> dict[str, Any]:
    nv = r.nvml
    # Renamed in R535 (throttle -> clocks event); older bindings only have the old name.
    reasons_fn = (
        "nvmlDeviceGetCurrentClocksEventReasons"
        if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
        else "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    util = r.call("utilization_pct", "nvmlDeviceGetUtilizationRates", h)
    processes = r.call("compute_processes", "nvmlDeviceGetComputeRunningProcesses", h)
    return {
        "power_w": _watts(r.call("power_w", "nvmlDeviceGetPowerUsage", h)),
        "power_limit_w": _watts(r.call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h)),
        "sm_clock_mhz": r.call("sm_clock_mhz", "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": r.call("mem_clock_mhz", "nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
        "clock_event_reasons": r.call("clock_event_reasons", reasons_fn, h),
        "utilization_pct": None if util is None else float(util.gpu),
        "compute_processes": None if processes is None else len(processes),
    }


def _memory_ecc(r: _Reader, h: Any) -> dict[str, Any]:
    nv = r.nvml
    mem = r.call("memory", "nvmlDeviceGetMemoryInfo", h)
    ecc = "nvmlDeviceGetTotalEccErrors"
    corrected, uncorrected = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    sbe = r.call(
        "retired_pages_sbe",
        "nvmlDeviceGetRetiredPages",
        h,
        nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    dbe = r.call(
        "retired_pages_dbe", "nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = r.call("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    return {
        "memory_used_mib": None if mem is None else mem.used // (1024 * 1024),
        "memory_total_mib": None if mem is None else mem.total // (1024 * 1024),
        "ecc_volatile_corrected": r.call("ecc_volatile_corrected", ecc, h, corrected, nv.NVML_VOLATILE_ECC),
        "ecc_volatile_uncorrected": r.call("ecc_volatile_uncorrected", ecc, h, uncorrected, nv.NVML_VOLATILE_ECC),
        "ecc_aggregate_corrected": r.call("ecc_aggregate_corrected", ecc, h, corrected, nv.NVML_AGGREGATE_ECC),
        "ecc_aggregate_uncorrected": r.call("ecc_aggregate_uncorrected", ecc, h, uncorrected, nv.NVML_AGGREGATE_ECC),
        "retired_pages_sbe": None if sbe is None else len(sbe),
        "retired_pages_dbe": None if dbe is None else len(dbe),
        "retired_pages_pending": None if pending is None else pending == nv.NVML_FEATURE_ENABLED,
    }


def _row_remap(r: _Reader, h: Any) -> dict[str, Any]:
    rows = r.call("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is None:
        return {}
    correctable, uncorrectable, pending, failure = rows
    return {
        "remapped_rows_correctable": correctable,
        "remapped_rows_uncorrectable": uncorrectable,
        "remapped_rows_pending": bool(pending),
        "remapped_rows_failure": bool(failure),
    }


def _pcie(r: _Reader, h: Any) -> dict[str, Any]:
    return {
        "pcie_link_gen": r.call("pcie_link_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h),
        "pcie_link_width": r.call("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth", h),
        "pcie_max_link_gen": r.call("pcie_max_link_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h),
        "pcie_max_link_width": r.call("pcie_max_link_width", "nvmlDeviceGetMaxPcieLinkWidth", h),
        "pcie_replay_count": r.call("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter", h),
    }


_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_value(r: _Reader, entry: Any, label: str) -> Any:
    if entry.nvmlReturn == 0:
        return getattr(entry.value, _VALUE_MEMBERS.get(entry.valueType, "ullVal"))
    if entry.nvmlReturn != r.nvml.NVML_ERROR_NOT_SUPPORTED:
        r.notes[f"{r.prefix}.{label}"] = f"field error {entry.nvmlReturn}"
    return None


def _fields(r: _Reader, h: Any) -> dict[str, Any]:
    """HBM temperature and the recovery action only exist as NVML field values."""
    nv = r.nvml
    wanted: list[tuple[str, int]] = [("hbm_temperature_c", nv.NVML_FI_DEV_MEMORY_TEMP)]
    if hasattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"):  # R570+ bindings
        wanted.append(("recovery_action", nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION))
    values = r.call("field_values", "nvmlDeviceGetFieldValues", h, [fid for _, fid in wanted])
    if values is None:
        return {}
    return {label: _field_value(r, entry, label) for (label, _), entry in zip(wanted, values)}


def _nvlink(r: _Reader, h: Any) -> dict[str, Any]:
    """Link states and error counters summed over the links the GPU has.

    NVML has no "how many links" call that works everywhere: links are probed from 0
    until NVML answers NotSupported/InvalidArgument, which marks the end (or no NVLink)."""
    nv = r.nvml
    states: list[bool] = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        try:
            states.append(nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED)
        except nv.NVMLError:
            break
    if not states:
        return {}
    counter = _nvlink_counter_sum(r, h, len(states))
    return {
        "nvlink_links_total": len(states),
        "nvlink_links_up": sum(states),
        "nvlink_crc_errors": _add(counter(nv.NVML_NVLINK_ERROR_DL_CRC_FLIT), counter(nv.NVML_NVLINK_ERROR_DL_CRC_DATA)),
        "nvlink_replay_errors": counter(nv.NVML_NVLINK_ERROR_DL_REPLAY),
        "nvlink_recovery_errors": counter(nv.NVML_NVLINK_ERROR_DL_RECOVERY),
    }


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _nvlink_counter_sum(r: _Reader, h: Any, links: int) -> Callable[[int], int | None]:
    def total(counter: int) -> int | None:
        values = [
            r.call(f"nvlink{link}.counter{counter}", "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
            for link in range(links)
        ]
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    return total


def _within_ranges(gpu: dict[str, Any], r: _Reader) -> dict[str, Any]:
    for key, (low, high) in _RANGES.items():
        value = gpu.get(key)
        if value is not None and not low <= value <= high:
            r.notes[f"{r.prefix}.{key}"] = f"implausible value {value} dropped"
            gpu[key] = None
    return {key: value for key, value in gpu.items() if value is not None}
