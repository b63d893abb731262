"""GPU rules: temperature, memory errors, NVLink, PCIe, clocks, recovery action, missing GPUs.

Defaults come from domain-facts.md §2-3 (DCGM health watch limits, nvidia-smi limits).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from ..choices import RecommendedAction as A
from ..choices import Severity as S
from .base import (
    CONFIRM_HEAT,
    Condition,
    RuleConfig,
    Screen,
    clear,
    counter_delta,
    elapsed_seconds,
    fire,
    gpu_rule,
    hold,
    node_rule,
    non_negative,
    rises,
    screen,
)

Gpu = Any  # telemetry.schema.GpuReading
Prev = dict[str, Any]
Gpus = list[tuple[Gpu, Prev]]


def _above(
    cfg: RuleConfig, value: float | None, limit: float | None, gpu: int, what: str, clear_margin: float
) -> Iterator[Condition]:
    """Fire above ``limit``, clear at or below ``limit - clear_margin``, hold in between."""
    if value is None or limit is None:
        yield hold(gpu=gpu)
    elif value > limit:
        yield fire(
            f"{what} {value:g} °C above {limit:g} °C",
            gpu=gpu,
            evidence={"temperature_c": value, "limit_c": limit, "clears_at_c": limit - clear_margin},
        )
    elif value <= limit - clear_margin:
        yield clear(gpu=gpu)
    else:
        yield hold(gpu=gpu)


@gpu_rule(
    "gpu_temperature",
    severity=S.DEGRADED,
    recommended_action=A.INSPECT,
    threshold=87,
    clear_threshold=5,
    clear_after_seconds=300,
    params={"use_gpu_limit": True, "confirm_seconds": CONFIRM_HEAT},
)
def gpu_temperature(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """GPU core above its own Max Operating temperature when reported, else above ``threshold`` °C.
    ``clear_threshold`` is the hysteresis margin in °C below the limit."""
    limit = gpu.max_operating_temp_c if cfg.param("use_gpu_limit", True) and gpu.max_operating_temp_c else cfg.threshold
    yield from _above(cfg, gpu.temperature_c, limit, gpu.index, "GPU temperature", cfg.clear_threshold or 0)


@gpu_rule(
    "hbm_temperature",
    severity=S.DEGRADED,
    recommended_action=A.INSPECT,
    threshold=95,
    clear_threshold=5,
    clear_after_seconds=300,
    params={"use_gpu_limit": True, "confirm_seconds": CONFIRM_HEAT},
)
def hbm_temperature(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """HBM above its Memory Max Operating temperature when reported, else above ``threshold`` °C."""
    own = gpu.hbm_max_operating_temp_c
    limit = own if cfg.param("use_gpu_limit", True) and own else cfg.threshold
    yield from _above(cfg, gpu.hbm_temperature_c, limit, gpu.index, "HBM temperature", cfg.clear_threshold or 0)


@gpu_rule("ecc_uncorrectable", severity=S.DEGRADED, recommended_action=A.RESET_GPU, threshold=0)
def ecc_uncorrectable(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Volatile uncorrectable ECC errors above ``threshold`` (DCGM: volatile DBE > 0 fails), or the
    aggregate count rising. A GPU reset zeroes the volatile count and clears it."""
    volatile = gpu.ecc_volatile_uncorrected
    rise = counter_delta(gpu.ecc_aggregate_uncorrected, prev.get("ecc_aggregate_uncorrected"))
    if volatile is None and rise is None:
        yield hold(gpu=gpu.index)
    elif (volatile or 0) > (cfg.threshold or 0) or (rise or 0) > 0:
        count = volatile or 0
        yield fire(
            f"{count} uncorrectable ECC error{'' if count == 1 else 's'} since driver load",
            gpu=gpu.index,
            evidence={"ecc_volatile_uncorrected": volatile, "aggregate_increase": rise, "threshold": cfg.threshold},
        )
    else:
        yield clear(gpu=gpu.index)


def _flag(gpu: Gpu, value: bool | None, summary: str, evidence: dict[str, Any]) -> Iterator[Condition]:
    if value is None:
        yield hold(gpu=gpu.index)
    elif value:
        yield fire(summary, gpu=gpu.index, evidence=evidence)
    else:
        yield clear(gpu=gpu.index)


@gpu_rule("row_remap_pending", severity=S.DEGRADED, recommended_action=A.RESET_GPU)
def row_remap_pending(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """A row remap waits for the next GPU reset (NVIDIA: reset at a convenient time, no RMA)."""
    yield from _flag(
        gpu,
        gpu.remapped_rows_pending,
        "Row remap pending: reset the GPU to activate it",
        {"remapped_rows_pending": gpu.remapped_rows_pending},
    )


@gpu_rule("row_remap_failure", severity=S.DEGRADED, recommended_action=A.RMA)
def row_remap_failure(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """The row-remap failure flag (NVIDIA RMA policy: a bank out of spares, or a remapped row failing again)."""
    yield from _flag(
        gpu,
        gpu.remapped_rows_failure,
        "Row remapping failed: RMA candidate",
        {"remapped_rows_failure": gpu.remapped_rows_failure},
    )


@gpu_rule("row_remap_uncorrectable_limit", severity=S.DEGRADED, recommended_action=A.RMA, threshold=512)
def row_remap_uncorrectable_limit(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Uncorrectable remapped rows at or above ``threshold`` (NVIDIA RMA policy: 512 per GPU)."""
    rows = gpu.remapped_rows_uncorrectable
    if rows is None:
        yield hold(gpu=gpu.index)
    elif rows >= (cfg.threshold or 512):
        yield fire(
            f"{rows} uncorrectable remapped rows (limit {cfg.threshold:g})",
            gpu=gpu.index,
            evidence={"remapped_rows_uncorrectable": rows, "threshold": cfg.threshold},
        )
    else:
        yield clear(gpu=gpu.index)


@gpu_rule(
    "retired_pages",
    severity=S.DEGRADED,
    recommended_action=A.RMA,
    threshold=63,
    params={"pending_severity": S.WARNING, "pending_action": A.REBOOT},
)
def retired_pages(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Retired pages (SBE + DBE) at or above ``threshold`` (DCGM: 63) -> RMA; a pending
    retirement -> warning, a reboot activates it (subject "pending")."""
    sbe, dbe = gpu.retired_pages_sbe, gpu.retired_pages_dbe
    if sbe is None and dbe is None:
        yield hold(gpu=gpu.index, subject="total")
    else:
        total = (sbe or 0) + (dbe or 0)
        if total >= (cfg.threshold or 63):
            yield fire(
                f"{total} retired pages (limit {cfg.threshold:g})",
                gpu=gpu.index,
                subject="total",
                evidence={"retired_pages_sbe": sbe, "retired_pages_dbe": dbe, "threshold": cfg.threshold},
            )
        else:
            yield clear(gpu=gpu.index, subject="total")
    pending = gpu.retired_pages_pending
    if pending is None:
        yield hold(gpu=gpu.index, subject="pending")
    elif pending:
        yield fire(
            "Page retirement pending: a reboot activates it",
            gpu=gpu.index,
            subject="pending",
            severity=cfg.param("pending_severity", S.WARNING),
            recommended_action=cfg.param("pending_action", A.REBOOT),
            evidence={"retired_pages_pending": True},
        )
    else:
        yield clear(gpu=gpu.index, subject="pending")


@gpu_rule("nvlink_down", severity=S.DEGRADED, recommended_action=A.RESET_GPU, clear_after_seconds=120)
def nvlink_down(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Fewer NVLinks up than the GPU has (NVIDIA Health Validation: 0 inactive links allowed)."""
    up, total = gpu.nvlink_links_up, gpu.nvlink_links_total
    if up is None or not total:
        yield hold(gpu=gpu.index)
    elif up < total:
        yield fire(
            f"{total - up} of {total} NVLinks down",
            gpu=gpu.index,
            evidence={"nvlink_links_up": up, "nvlink_links_total": total},
        )
    else:
        yield clear(gpu=gpu.index)


def _rate(ctx: Any, gpu: Gpu, prev: Prev, field: str) -> tuple[int | None, float | None]:
    delta = counter_delta(getattr(gpu, field), prev.get(field))
    seconds = elapsed_seconds(ctx.report.collected_at, ctx.previous_report_at)
    return delta, seconds


@gpu_rule(
    "nvlink_crc_rate", severity=S.DEGRADED, recommended_action=A.RESET_GPU, threshold=100, clear_after_seconds=300
)
def nvlink_crc_rate(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """NVLink CRC errors at or above ``threshold`` per second between reports (DCGM: 100/s)."""
    delta, seconds = _rate(ctx, gpu, prev, "nvlink_crc_errors")
    if delta is None or seconds is None:
        yield hold(gpu=gpu.index)
        return
    rate = delta / seconds
    if rate >= (cfg.threshold or 100):
        yield fire(
            f"NVLink CRC errors at {rate:.1f}/s (limit {cfg.threshold:g}/s)",
            gpu=gpu.index,
            evidence={"crc_increase": delta, "seconds": seconds, "rate_per_s": rate, "threshold_per_s": cfg.threshold},
        )
    else:
        yield clear(gpu=gpu.index)


@gpu_rule(
    "nvlink_replay_recovery", severity=S.WARNING, recommended_action=A.INSPECT, threshold=0, clear_after_seconds=900
)
def nvlink_replay_recovery(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Any increase of NVLink replay or recovery errors (DCGM: any increment is an error)."""
    replay = counter_delta(gpu.nvlink_replay_errors, prev.get("nvlink_replay_errors"))
    recovery = counter_delta(gpu.nvlink_recovery_errors, prev.get("nvlink_recovery_errors"))
    if replay is None and recovery is None:
        yield hold(gpu=gpu.index)
    elif (replay or 0) + (recovery or 0) > (cfg.threshold or 0):
        yield fire(
            f"NVLink errors rising: {replay or 0} replay, {recovery or 0} recovery",
            gpu=gpu.index,
            evidence={"replay_increase": replay, "recovery_increase": recovery},
        )
    else:
        yield clear(gpu=gpu.index)


@gpu_rule(
    "pcie_degraded",
    severity=S.DEGRADED,
    recommended_action=A.INSPECT,
    clear_after_seconds=120,
    params={"gen_severity": S.WARNING},
)
def pcie_degraded(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """PCIe link narrower than its maximum (subject "width"); a lower generation only counts while
    the GPU is busy, because idle GPUs downshift PCIe to save power (subject "gen", warning)."""
    width, max_width = gpu.pcie_link_width, gpu.pcie_max_link_width
    if width is None or not max_width:
        yield hold(gpu=gpu.index, subject="width")
    elif width < max_width:
        yield fire(
            f"PCIe link x{width}, expected x{max_width}",
            gpu=gpu.index,
            subject="width",
            evidence={"pcie_link_width": width, "pcie_max_link_width": max_width},
        )
    else:
        yield clear(gpu=gpu.index, subject="width")
    gen, max_gen, busy = gpu.pcie_link_gen, gpu.pcie_max_link_gen, (gpu.utilization_pct or 0) > 0
    if gen is None or not max_gen or (gen < max_gen and not busy):
        yield hold(gpu=gpu.index, subject="gen")
    elif gen < max_gen:
        yield fire(
            f"PCIe Gen{gen} under load, expected Gen{max_gen}",
            gpu=gpu.index,
            subject="gen",
            severity=cfg.param("gen_severity", S.WARNING),
            evidence={"pcie_link_gen": gen, "pcie_max_link_gen": max_gen, "utilization_pct": gpu.utilization_pct},
        )
    else:
        yield clear(gpu=gpu.index, subject="gen")


# Replays per minute per lane a healthy link may see: BER 1e-12 x lane rate x 60 s (DCGM).
PCIE_REPLAYS_PER_LANE_MIN = {"1": 0.15, "2": 0.3, "3": 0.48, "4": 0.96, "5": 1.92, "6": 3.84}


def pcie_replay_budget(gen: int, width: int, per_lane: dict[str, float] | None = None) -> int:
    """Replays per minute allowed on a link: ceil(per-lane budget x width); Gen5 x16 -> 31."""
    table = per_lane or PCIE_REPLAYS_PER_LANE_MIN
    return math.ceil(table.get(str(gen), table["5"]) * width)


@gpu_rule(
    "pcie_replay_rate",
    severity=S.WARNING,
    recommended_action=A.INSPECT,
    clear_after_seconds=600,
    params={"replays_per_lane_per_min": PCIE_REPLAYS_PER_LANE_MIN},
)
def pcie_replay_rate(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """PCIe replays per minute above the link's budget (DCGM formula; Gen5 x16: 31/min).
    ``threshold``, when set, replaces the computed budget."""
    delta, seconds = _rate(ctx, gpu, prev, "pcie_replay_count")
    gen = gpu.pcie_link_gen or gpu.pcie_max_link_gen
    width = gpu.pcie_link_width or gpu.pcie_max_link_width
    if delta is None or seconds is None or not gen or not width:
        yield hold(gpu=gpu.index)
        return
    budget = cfg.threshold or pcie_replay_budget(gen, width, cfg.param("replays_per_lane_per_min"))
    per_min = delta * 60 / seconds
    if per_min > budget:
        yield fire(
            f"PCIe replays at {per_min:.0f}/min (budget {budget:g}/min for Gen{gen} x{width})",
            gpu=gpu.index,
            evidence={"replay_increase": delta, "seconds": seconds, "per_minute": per_min, "budget_per_minute": budget},
        )
    else:
        yield clear(gpu=gpu.index)


CLOCK_REASONS = {0x8: "HW_SLOWDOWN", 0x40: "HW_THERMAL", 0x80: "HW_POWER_BRAKE"}


@gpu_rule(
    "clock_slowdown",
    severity=S.WARNING,
    recommended_action=A.INSPECT,
    clear_after_seconds=300,
    params={"mask": 0x8 | 0x40 | 0x80},
)
def clock_slowdown(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """Hardware clock slowdown active: HW_SLOWDOWN 0x8, HW_THERMAL 0x40, HW_POWER_BRAKE 0x80."""
    reasons = gpu.clock_event_reasons
    if reasons is None:
        yield hold(gpu=gpu.index)
        return
    active = reasons & int(cfg.param("mask", 0xC8))
    if active:
        names = [n for bit, n in CLOCK_REASONS.items() if active & bit] or [hex(active)]
        yield fire(
            f"Clocks slowed by hardware: {', '.join(names)}",
            gpu=gpu.index,
            evidence={"clock_event_reasons": hex(reasons), "active": names},
        )
    else:
        yield clear(gpu=gpu.index)


# nvmlGpuRecoveryAction -> (severity, action, label); DCGM: 1, 2, 4 FAIL; 3 WARN. Also what
# XID 154 lines name (rules/xid.py). 5-7 came with R610 drivers (NVML and XID 154 only).
RECOVERY_ACTIONS = {
    1: (S.DEGRADED, A.RESET_GPU, "GPU reset required"),
    2: (S.CATASTROPHIC, A.REBOOT, "Node reboot required"),
    3: (S.WARNING, A.NONE, "Drain peer-to-peer traffic"),
    4: (S.DEGRADED, A.RESET_GPU, "Drain and reset the GPU"),
    5: (S.DEGRADED, A.INSPECT, "Recover the IMEX domain"),
    6: (S.DEGRADED, A.REBOOT, "Reset the GPU's PCIe bus"),  # a reboot resets the bus; nvidia-smi -r may not
    7: (S.CATASTROPHIC, A.REBOOT, "System reboot required"),
}


@gpu_rule("recovery_action", severity=S.DEGRADED, recommended_action=A.RESET_GPU)
def recovery_action(cfg: RuleConfig, ctx: Any, gpu: Gpu, prev: Prev) -> Iterator[Condition]:
    """The driver names a recovery (NVML GPU recovery action, XID 154): severity by value."""
    value = gpu.recovery_action
    if value is None:
        yield hold(gpu=gpu.index)
    elif value in RECOVERY_ACTIONS:
        severity, action, label = RECOVERY_ACTIONS[value]
        yield fire(
            f"Driver recovery action: {label}",
            gpu=gpu.index,
            severity=severity,
            recommended_action=action,
            evidence={"recovery_action": value},
        )
    else:
        yield clear(gpu=gpu.index)


@node_rule("gpu_missing", severity=S.CATASTROPHIC, recommended_action=A.REBOOT)
def gpu_missing(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """Fewer GPUs than the hardware profile expects, or a GPU index seen before now absent."""
    report = ctx.report
    if "nvml" in report.collector_errors:
        yield hold()  # nvml_unavailable speaks for this report
        return
    seen = {g.index for g in report.gpus}
    expected = ctx.expected_gpu_count or 0
    vanished = sorted(set(ctx.previous_gpus) - seen)
    if len(seen) < expected or vanished:
        yield fire(
            f"{len(seen)} GPUs visible, expected {max(expected, len(seen) + len(vanished))}",
            evidence={"visible": sorted(seen), "expected_count": expected, "vanished": vanished},
        )
    else:
        yield clear()


@node_rule("nvml_unavailable", severity=S.CATASTROPHIC, recommended_action=A.REBOOT)
def nvml_unavailable(cfg: RuleConfig, ctx: Any) -> Iterator[Condition]:
    """The agent could not talk to NVML (driver not loaded, GPU wedged)."""
    error = ctx.report.collector_errors.get("nvml")
    if error:
        yield fire(f"NVML unavailable: {error[:200]}", evidence={"nvml_error": error[:2000]})
    elif ctx.report.gpus:
        yield clear()
    else:
        yield hold()


# --- Screens: whether each rule above may fire on a report (base.screen). Each mirrors its
# rule's fire condition (or a looser one), compiled once per config; a healthy GPU fails all.


def _above_screen(cfg: RuleConfig, value_field: str, own_limit_field: str) -> Screen:
    own, threshold = cfg.param("use_gpu_limit", True), cfg.threshold

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            value, own_limit = getattr(gpu, value_field), getattr(gpu, own_limit_field)
            limit = own_limit if own and own_limit else threshold
            if value is not None and limit is not None and value > limit:
                return True
        return False

    return may_fire


@screen("gpu_temperature")
def _gpu_temperature_screen(cfg: RuleConfig) -> Screen:
    return _above_screen(cfg, "temperature_c", "max_operating_temp_c")


@screen("hbm_temperature")
def _hbm_temperature_screen(cfg: RuleConfig) -> Screen:
    return _above_screen(cfg, "hbm_temperature_c", "hbm_max_operating_temp_c")


@screen("ecc_uncorrectable")
def _ecc_uncorrectable_screen(cfg: RuleConfig) -> Screen:
    threshold = cfg.threshold or 0

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, prev in gpus:
            if (gpu.ecc_volatile_uncorrected or 0) > threshold:
                return True
            if rises(gpu.ecc_aggregate_uncorrected, prev.get("ecc_aggregate_uncorrected")):
                return True
        return False

    return may_fire


@screen("row_remap_pending")
def _row_remap_pending_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: any(gpu.remapped_rows_pending for gpu, _ in gpus)


@screen("row_remap_failure")
def _row_remap_failure_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: any(gpu.remapped_rows_failure for gpu, _ in gpus)


@screen("row_remap_uncorrectable_limit")
def _row_remap_uncorrectable_limit_screen(cfg: RuleConfig) -> Screen:
    limit = cfg.threshold or 512

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            rows = gpu.remapped_rows_uncorrectable
            if rows is not None and rows >= limit:
                return True
        return False

    return may_fire


@screen("retired_pages")
def _retired_pages_screen(cfg: RuleConfig) -> Screen:
    limit = cfg.threshold or 63

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            sbe, dbe = gpu.retired_pages_sbe, gpu.retired_pages_dbe
            if gpu.retired_pages_pending or ((sbe is not None or dbe is not None) and (sbe or 0) + (dbe or 0) >= limit):
                return True
        return False

    return may_fire


@screen("nvlink_down")
def _nvlink_down_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            up, total = gpu.nvlink_links_up, gpu.nvlink_links_total
            if up is not None and total and up < total:
                return True
        return False

    return may_fire


def _rise_screen(*fields: str) -> Screen:
    """May fire only where one of ``fields`` (cumulative counters) rose since the previous report."""

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, prev in gpus:
            for name in fields:
                now = getattr(gpu, name)  # rises(), inlined: this runs for every GPU of every report
                if now is not None:
                    before = prev.get(name)
                    if before is not None and now > before:
                        return True
        return False

    return may_fire


@screen("nvlink_crc_rate")
def _nvlink_crc_rate_screen(cfg: RuleConfig) -> Screen | None:
    limit = cfg.threshold or 100
    # A limit of 0 or less fires on an unchanged counter (a rate of 0): no screen.
    return _rise_screen("nvlink_crc_errors") if non_negative(limit) and limit > 0 else None


@screen("nvlink_replay_recovery")
def _nvlink_replay_recovery_screen(cfg: RuleConfig) -> Screen | None:
    ok = non_negative(cfg.threshold or 0)
    return _rise_screen("nvlink_replay_errors", "nvlink_recovery_errors") if ok else None


@screen("pcie_degraded")
def _pcie_degraded_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            width, max_width = gpu.pcie_link_width, gpu.pcie_max_link_width
            if width is not None and max_width and width < max_width:
                return True
            gen, max_gen = gpu.pcie_link_gen, gpu.pcie_max_link_gen
            if gen is not None and max_gen and gen < max_gen and (gpu.utilization_pct or 0) > 0:
                return True
        return False

    return may_fire


@screen("pcie_replay_rate")
def _pcie_replay_rate_screen(cfg: RuleConfig) -> Screen | None:
    # The budget must not be below zero, or an unchanged counter (0 replays a minute) fires.
    if cfg.threshold:
        ok = non_negative(cfg.threshold)
    else:
        table = cfg.param("replays_per_lane_per_min") or PCIE_REPLAYS_PER_LANE_MIN
        ok = isinstance(table, dict) and all(non_negative(v) for v in table.values())
    return _rise_screen("pcie_replay_count") if ok else None


@screen("clock_slowdown")
def _clock_slowdown_screen(cfg: RuleConfig) -> Screen | None:
    try:
        mask = int(cfg.param("mask", 0xC8))
    except (TypeError, ValueError):
        return None  # the rule raises on every reading: let it say so

    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        for gpu, _ in gpus:
            reasons = gpu.clock_event_reasons
            if reasons is not None and reasons & mask:
                return True
        return False

    return may_fire


@screen("recovery_action")
def _recovery_action_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: any(gpu.recovery_action in RECOVERY_ACTIONS for gpu, _ in gpus)


@screen("gpu_missing")
def _gpu_missing_screen(cfg: RuleConfig) -> Screen:
    def may_fire(ctx: Any, gpus: Gpus) -> bool:
        report = ctx.report
        if "nvml" in report.collector_errors:
            return False
        seen = {g.index for g in report.gpus}
        return len(seen) < (ctx.expected_gpu_count or 0) or not seen.issuperset(ctx.previous_gpus)

    return may_fire


@screen("nvml_unavailable")
def _nvml_unavailable_screen(cfg: RuleConfig) -> Screen:
    return lambda ctx, gpus: bool(ctx.report.collector_errors.get("nvml"))
