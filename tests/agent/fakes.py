"""A stand-in for pynvml built from a real H100's answers (tests/agent/fixtures/nvml/).

No NVIDIA driver can run here, so NVML itself cannot: this object answers the same
functions from the fixture. Constants and the NVMLError classes are pynvml's own, so
the collector's error handling meets the real exception types.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURE = Path(__file__).parent / "fixtures" / "nvml" / "h100-80gb-hbm3.json"


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """pynvml's interface over the fixture; ``init_error`` makes nvmlInit fail."""

    def __init__(self, data: dict[str, Any] | None = None, init_error: int | None = None):
        self.data = data or json.loads(FIXTURE.read_text())
        self.init_error = init_error
        self.shutdowns = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- system ----------------------------------------------------------------------
    def nvmlInit(self):
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.data["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.data["cuda_driver_version"]

    def nvmlSystemGetNVMLVersion(self):
        return self.data["nvml_version"]

    def nvmlDeviceGetCount(self):
        return len(self.data["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index):
        gpu = self.data["gpus"][index]
        if gpu.get("lost"):
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def _gpu(self, handle, call):
        gpu = self.data["gpus"][handle]
        code = gpu.get("error", {}).get(call)
        if code is not None:
            raise nvml_error(code)
        return gpu

    def _unsupported(self):
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # --- identity ---------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h, "nvmlDeviceGetPciInfo")["bus"].encode())  # c_char array -> bytes

    def nvmlDeviceGetName(self, h):
        return self.data["name"]

    def nvmlDeviceGetSerial(self, h):
        return self._gpu(h, "nvmlDeviceGetSerial")["serial"]

    def nvmlDeviceGetVbiosVersion(self, h):
        return self.data["vbios_version"]

    def nvmlDeviceGetPersistenceMode(self, h):
        return pynvml.NVML_FEATURE_ENABLED

    # --- thermals, power, clocks ------------------------------------------------------
    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(h, "nvmlDeviceGetTemperature")["temp"]

    def nvmlDeviceGetTemperatureThreshold(self, h, which):
        names = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "mem_max",
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "gpu_max",
        }
        return self.data["thresholds"][names[which]]

    def nvmlDeviceGetPowerUsage(self, h):
        return self._gpu(h, "nvmlDeviceGetPowerUsage")["power_mw"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self.data["power_limit_mw"]

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self.data["sm_clock_mhz"] if clock == pynvml.NVML_CLOCK_SM else self.data["mem_clock_mhz"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self.data["clocks_event_reasons"]

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=0, memory=0)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(
            total=self.data["memory_total_bytes"],
            used=self.data["memory_used_bytes"],
            free=self.data["memory_total_bytes"] - self.data["memory_used_bytes"],
        )

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        # A GPU's "pids" stand for the jobs on it (what a reset must not kill).
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in self._gpu(h, "procs").get("pids", [])]

    # --- memory errors ----------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        gpu = self._gpu(h, "nvmlDeviceGetTotalEccErrors")
        if (error_type, counter_type) == (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC):
            return gpu.get("ecc_volatile_corrected", 0)
        return 0

    def nvmlDeviceGetRetiredPages(self, h, cause):
        self._unsupported()  # H100: nvidia-smi shows "Retired Pages: N/A"

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        self._unsupported()

    def nvmlDeviceGetRemappedRows(self, h):
        return tuple(self._gpu(h, "nvmlDeviceGetRemappedRows").get("remapped_rows", [0, 0, 0, 0]))

    # --- links ------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.data["nvlink_links"]:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        down = self._gpu(h, "nvmlDeviceGetNvLinkState").get("nvlink_down", [])
        return pynvml.NVML_FEATURE_DISABLED if link in down else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        if counter == pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA:
            self._unsupported()  # deprecated on Hopper
        if counter == pynvml.NVML_NVLINK_ERROR_DL_REPLAY:
            return self._gpu(h, "x").get("nvlink_replay", {}).get(str(link), 0)
        return 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self.data["pcie"]["gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._gpu(h, "x").get("pcie_width", self.data["pcie"]["width"])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self.data["pcie"]["max_gen"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self.data["pcie"]["max_width"]

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self.data["pcie"]["replay"]

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        gpu = self._gpu(h, "nvmlDeviceGetFieldValues")
        values = []
        for field_id in field_ids:
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                values.append(
                    SimpleNamespace(
                        nvmlReturn=0,
                        valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                        value=SimpleNamespace(uiVal=gpu["hbm_temp"]),
                    )
                )
            else:  # the recovery-action field needs R570+
                values.append(SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, valueType=0, value=None))
        return values
