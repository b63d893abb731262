"""Trend analysis, peer comparison and lemon scoring: pure functions over plain numbers.

Nothing here reads the database or Django settings; ``trends.services`` feeds these
functions what ``trends.collect`` read, and the tests feed them planted numbers.

Methods and defaults (each one a named constant or a field of a spec below):

- **Trend**: an ordinary least-squares line through (day, value) points over a window
  (``TREND_WINDOW_DAYS``, 6 weeks). A figure that should stay flat or high is *degrading*
  when it falls faster than a share of its level per week (NCCL bus bandwidth 2 %/week,
  GPU stress TFLOP/s 2 %/week), a counter when it climbs faster than a count per week
  (corrected ECC 100/week, remapped rows 1/week), a temperature at comparable load
  (utilisation >= 80 %) when it creeps up faster than 0.5 degC/week. The line must rest
  on ``min_points`` points spanning ``min_span_days`` and its slope must be clear of noise
  (``|t| >= min_t``, t = slope / its standard error), so a few noisy runs flag nothing.
- **Peers**: a node's latest figure against its hardware profile's median; an
  *underperformer* is more than ``PEER_THRESHOLD`` (10 %) below the median *and* at least
  ``PEER_MIN_Z`` (3) robust standard deviations below it (1.4826 x MAD, the median absolute
  deviation): the median and the MAD ignore the outliers they are meant to find, and the
  z-score keeps a profile whose nodes scatter widely from flagging its slow half.
- **Lemon score**: a weighted sum of the signals Meta FAIR found most correlated with lemon
  nodes (Kokolis et al., HPCA 2025: excl_jobid_count, xid_cnt, tickets, out_count,
  single/multi-node fails, single-node failure rate), each normalised to [0, 1) by
  ``v / (v + reference)`` (half-way at the reference, saturating, so no single signal
  dominates), scaled to 0-100. ``LEMON_THRESHOLD`` (40) flags a lemon; Meta found about
  1.2 % of nodes to be lemons, so a fleet with many more above it needs its weights tuned.
- **Hysteresis**: every verdict carries ``ratio`` (how far past its threshold, 1 = at it);
  a flag opens at 1 and stays open while the ratio holds at ``CLEAR_RATIO`` (0.75), so a
  figure hovering at the threshold does not open and close a flag every day.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

TREND_WINDOW_DAYS = 42
LEMON_WINDOW_DAYS = 30
PEER_THRESHOLD = 0.10
PEER_MIN_Z = 3.0
PEER_MIN_NODES = 5
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
LEMON_THRESHOLD = 40.0
CLEAR_RATIO = 0.75
REPEAT_WITHIN_HOURS = 72.0  # an incident this soon after the previous one is a repeat (the escalation window)
HISTOGRAM_BINS = 24

Point = tuple[float, float]  # (days since the window's start, value)


# --- Trends -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """An ordinary least-squares line y = intercept + slope * x (x in days)."""

    n: int
    slope: float
    intercept: float
    r2: float
    t: float  # slope / standard error of the slope; inf for a perfect line

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def least_squares(points: Sequence[Point]) -> Fit | None:
    """The least-squares line through ``points``; None with fewer than two distinct x."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sxy / sxx
    intercept = my - slope * mx
    residual = max(syy - slope * sxy, 0.0)
    r2 = 1.0 - residual / syy if syy > 0 else 1.0
    if n > 2 and residual > 0:
        t = slope / math.sqrt(residual / (n - 2) / sxx)
    else:
        t = math.copysign(math.inf, slope) if slope else 0.0
    return Fit(n=n, slope=slope, intercept=intercept, r2=r2, t=t)


@dataclass(frozen=True)
class TrendSpec:
    """When a figure's trend is a degradation.

    ``falls``: the figure should hold (bandwidth, TFLOP/s); ``climbs``: it should not rise
    (counters, temperature). ``relative``: the threshold is a share of the level at the
    window's start per week; otherwise units per week.
    """

    figure: str
    label: str
    unit: str
    direction: Literal["falls", "climbs"]
    threshold: float
    relative: bool
    min_points: int = 4
    min_span_days: float = 14.0
    min_t: float = 3.0


TREND_SPECS: dict[str, TrendSpec] = {
    spec.figure: spec
    for spec in (
        TrendSpec("nccl_busbw_gbps", "NCCL bus bandwidth", "GB/s", "falls", 0.02, relative=True),
        TrendSpec("gpu_min_tflops", "GPU stress TFLOP/s (slowest GPU)", "TFLOP/s", "falls", 0.02, relative=True),
        TrendSpec("training_samples_per_s", "Training-step throughput", "samples/s", "falls", 0.02, relative=True),
        TrendSpec("ecc_corrected", "Corrected ECC errors (all GPUs)", "errors", "climbs", 100.0, relative=False),
        TrendSpec("remapped_rows", "Remapped HBM rows (all GPUs)", "rows", "climbs", 1.0, relative=False),
        TrendSpec("temperature_at_load", "GPU temperature at >= 80 % load", "degC", "climbs", 0.5, relative=False),
    )
}
# Figures measured by active checks: the only ones compared with peers (same test, same SKU).
PEER_FIGURES = ("nccl_busbw_gbps", "gpu_min_tflops")


@dataclass(frozen=True)
class Trend:
    """A figure's line over the window and how it compares with its spec's threshold."""

    spec: TrendSpec
    fit: Fit
    per_week: float  # units per week, signed
    share_per_week: float | None  # fraction of the starting level per week, signed (relative specs)
    ratio: float  # the degradation over the threshold: >= 1 is past it, <= 0 is no degradation at all
    significant: bool  # enough points, span and a clear slope

    @property
    def degrading(self) -> bool:
        return self.significant and self.ratio >= 1.0


def trend(spec: TrendSpec, points: Sequence[Point]) -> Trend | None:
    """The trend of ``points`` under ``spec``; None when no line can be drawn."""
    fit = least_squares(points)
    if fit is None:
        return None
    xs = [x for x, _ in points]
    per_week = fit.slope * 7.0
    share = None
    if spec.relative:
        level = fit.at(min(xs))
        if level <= 0:
            return None
        share = per_week / level
        measure = share
    else:
        measure = per_week
    worse = -measure if spec.direction == "falls" else measure
    significant = fit.n >= spec.min_points and max(xs) - min(xs) >= spec.min_span_days and abs(fit.t) >= spec.min_t
    return Trend(
        spec=spec,
        fit=fit,
        per_week=per_week,
        share_per_week=share,
        ratio=worse / spec.threshold,
        significant=significant,
    )


# --- Peers ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerStats:
    """A robust picture of one figure over a hardware profile's nodes."""

    n: int
    median: float
    mad: float


def peer_stats(values: Sequence[float], *, min_nodes: int = PEER_MIN_NODES) -> PeerStats | None:
    """Median and MAD of the peers' values; None with too few peers to speak of a norm."""
    if len(values) < min_nodes:
        return None
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return PeerStats(n=len(values), median=median, mad=mad)


@dataclass(frozen=True)
class PeerVerdict:
    value: float
    median: float
    mad: float
    deficit: float  # share below the median (negative: above it)
    robust_z: float  # (value - median) / (1.4826 MAD); -inf/inf when the MAD is 0
    ratio: float  # deficit / threshold
    below: bool


def compare_to_peers(
    value: float, stats: PeerStats, *, threshold: float = PEER_THRESHOLD, min_z: float = PEER_MIN_Z
) -> PeerVerdict | None:
    """``value`` against its peers: below when more than ``threshold`` under the median and
    at least ``min_z`` robust standard deviations under it."""
    if stats.median <= 0:
        return None
    deficit = (stats.median - value) / stats.median
    sigma = MAD_TO_SIGMA * stats.mad
    if sigma > 0:
        z = (value - stats.median) / sigma
    else:  # every peer alike: any distance is many sigmas
        z = 0.0 if value == stats.median else math.copysign(math.inf, value - stats.median)
    return PeerVerdict(
        value=value,
        median=stats.median,
        mad=stats.mad,
        deficit=deficit,
        robust_z=z,
        ratio=deficit / threshold,
        below=deficit > threshold and z <= -min_z,
    )


def histogram(values: Sequence[float], *, bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Equal-width bins over the values' range: {"edges": [bins + 1], "counts": [bins]} (bounded evidence)."""
    if not values:
        return {"edges": [], "counts": []}
    low, high = min(values), max(values)
    if high == low:
        return {"edges": [low, high], "counts": [float(len(values))]}
    width = (high - low) / bins
    counts = [0.0] * bins
    for v in values:
        counts[min(int((v - low) / width), bins - 1)] += 1
    return {"edges": [low + i * width for i in range(bins + 1)], "counts": counts}


# --- Lemons -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LemonSignal:
    """One input of the lemon score: its weight, the value worth half a point, and the paper's signal."""

    name: str
    label: str
    weight: float
    reference: float
    paper: str


# Weights follow the order of correlation in Kokolis et al. (excl_jobid_count, xid_cnt, tickets,
# out_count, multi/single node fails, failure rate); references are what a healthy node rarely
# reaches in a month (Meta's fleet: 2.3 to 6.5 failures per 1000 node-days).
LEMON_SIGNALS: tuple[LemonSignal, ...] = (
    LemonSignal("incidents", "Incidents (remediations opened)", 3.0, 2.0, "excl_jobid_count, single/multi-node fails"),
    LemonSignal("incident_rate", "Incidents per 30 days in service", 2.0, 1.0, "single_node_node_failure_rate"),
    LemonSignal("xids", "XIDs (application XIDs excluded)", 2.5, 4.0, "xid_cnt"),
    LemonSignal("tickets", "Repair tickets", 2.0, 1.0, "tickets"),
    LemonSignal("rmas", "RMA cases", 1.5, 1.0, "tickets"),
    LemonSignal("out_count", "Times taken out of production", 1.5, 2.0, "out_count"),
    LemonSignal("hours_out", "Hours out of production", 1.0, 72.0, "out_count (duration)"),
    LemonSignal("repeat_incidents", "Incidents within 72 h of the previous one", 1.0, 1.0, "repeated failures"),
    LemonSignal("failed_checks", "Failed Day 1 stages and active checks", 1.0, 2.0, "failed health checks"),
)


@dataclass(frozen=True)
class LemonScore:
    score: float  # 0-100
    signals: dict[str, float]
    contributions: dict[str, float]  # points of the score per signal; they add up to ``score``

    @property
    def ratio(self) -> float:
        return self.score / LEMON_THRESHOLD


def lemon_score(signals: Mapping[str, float], spec: Sequence[LemonSignal] = LEMON_SIGNALS) -> LemonScore:
    """The weighted sum of the normalised signals, 0-100 (missing signals count as 0)."""
    total = sum(s.weight for s in spec)
    contributions: dict[str, float] = {}
    for s in spec:
        value = max(float(signals.get(s.name, 0.0)), 0.0)
        contributions[s.name] = 100.0 * s.weight * value / (value + s.reference) / total
    return LemonScore(
        score=sum(contributions.values()),
        contributions=contributions,
        signals={s.name: float(signals.get(s.name, 0.0)) for s in spec},
    )


def top_offenders(scores: Mapping[int, LemonScore], n: int = 25) -> list[tuple[int, LemonScore]]:
    """The ``n`` highest scores, highest first (ties: lower node id first); zero scores left out."""
    ranked = sorted(((k, v) for k, v in scores.items() if v.score > 0), key=lambda kv: (-kv[1].score, kv[0]))
    return ranked[:n]


def repeats(times_hours: Iterable[float], *, within_hours: float = REPEAT_WITHIN_HOURS) -> int:
    """How many incidents came within ``within_hours`` of the one before (times in hours)."""
    ordered = sorted(times_hours)
    return sum(1 for a, b in itertools.pairwise(ordered) if b - a <= within_hours)


@dataclass
class OutOfProduction:
    hours: float = 0.0
    count: int = 0
    _since: float | None = field(default=None, repr=False)


def out_of_production(start_out: bool, changes: Sequence[tuple[float, bool | None]], end: float) -> OutOfProduction:
    """Time (hours) and times a node was out of production over [0, end] (hours since the window's start).

    ``start_out``: out at the window's start. ``changes``: (hour, out) per state change, in
    order: True entering an out-of-production state (draining, triage, remediation, repair,
    RMA), False entering production, None no change (a Day 1 stage keeps the node where it
    was: re-validation after a fault is still time out, a new node's Day 1 is not).
    """
    state = OutOfProduction(_since=0.0 if start_out else None)
    for at, out in changes:
        if out is True and state._since is None:
            state._since = at
            state.count += 1
        elif out is False and state._since is not None:
            state.hours += max(at - state._since, 0.0)
            state._since = None
    if state._since is not None:
        state.hours += max(end - state._since, 0.0)
        state._since = None
    return state
