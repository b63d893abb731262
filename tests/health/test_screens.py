"""Rule screens (health.rules.base.screen): skipping a rule the screen rules out changes no verdict.

Two differentials. Per rule, property-based: on generated readings and configs, wherever a
screen says "nothing to do", running the rule yields no fire condition and no statement.
End to end: generated report sequences (healthy, each rule's threshold crossing, the
hysteresis band and the clear, missing fields, XIDs) go through evaluation screened on one
node and with every rule run (as before screens) on its twin: same findings, same alerts.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health import ruleconfig
from health.evaluation import evaluate_reports, reports_are_quiet
from health.models import Alert, Finding, HealthRule, RuleWindow
from health.rules import REGISTRY, RuleConfig
from health.rules.base import FIRE, GPU, SCREENS
from telemetry.schema import AgentReport, GpuReading
from tests.factories import HardwareProfileFactory, NodeFactory

from .conftest import T0, context, gpu, ib_port, report

# --- Per rule: a screen that says "nothing to do" is right -----------------------------------

TEMPS = st.none() | st.sampled_from([0.0, 41.0, 82.0, 84.5, 87.0, 87.5, 95.0, 96.0, 150.0])
COUNTS = st.none() | st.sampled_from([0, 1, 2, 5, 40, 63, 512, 3_000, 100_000])
FLAGS = st.none() | st.booleans()
GPU_FIELDS = {
    "temperature_c": TEMPS,
    "hbm_temperature_c": TEMPS,
    "max_operating_temp_c": TEMPS,
    "hbm_max_operating_temp_c": TEMPS,
    "utilization_pct": st.none() | st.sampled_from([0.0, 50.0]),
    "clock_event_reasons": st.none() | st.sampled_from([0, 1, 0x4, 0x8, 0x40, 0x80, 0xFF]),
    "ecc_volatile_uncorrected": COUNTS,
    "ecc_aggregate_uncorrected": COUNTS,
    "retired_pages_sbe": COUNTS,
    "retired_pages_dbe": COUNTS,
    "retired_pages_pending": FLAGS,
    "remapped_rows_uncorrectable": COUNTS,
    "remapped_rows_pending": FLAGS,
    "remapped_rows_failure": FLAGS,
    "nvlink_links_total": st.none() | st.sampled_from([0, 18]),
    "nvlink_links_up": st.none() | st.sampled_from([0, 17, 18]),
    "nvlink_crc_errors": COUNTS,
    "nvlink_replay_errors": COUNTS,
    "nvlink_recovery_errors": COUNTS,
    "pcie_link_gen": st.none() | st.sampled_from([1, 4, 5]),
    "pcie_link_width": st.none() | st.sampled_from([0, 8, 16]),
    "pcie_max_link_gen": st.none() | st.sampled_from([0, 5]),
    "pcie_max_link_width": st.none() | st.sampled_from([0, 16]),
    "pcie_replay_count": COUNTS,
    "recovery_action": st.none() | st.integers(0, 4),
}
COUNTER_FIELDS = ["ecc_aggregate_uncorrected", "nvlink_crc_errors", "nvlink_replay_errors"]
COUNTER_FIELDS += ["nvlink_recovery_errors", "pcie_replay_count"]
IB_COUNTERS = ["symbol_error", "port_rcv_errors", "link_error_recovery", "link_downed", "local_link_integrity_errors"]


@st.composite
def gpu_readings(draw: Any, index: int) -> tuple[GpuReading, GpuReading | dict[str, Any]]:
    fields = {name: draw(values) for name, values in GPU_FIELDS.items()}
    reading = msgspec.convert(gpu(index, **fields), GpuReading)
    counters = draw(st.none() | st.fixed_dictionaries(dict.fromkeys(COUNTER_FIELDS, COUNTS)))
    # The previous reading as ingest gives it (a GpuReading), or none ({} is what the rules get then).
    return reading, msgspec.structs.replace(reading, **counters) if counters else {}


@st.composite
def ib_ports(draw: Any, index: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    counters = draw(st.dictionaries(st.sampled_from(IB_COUNTERS), st.sampled_from([0, 1, 5, 400, 10_000])))
    port = ib_port(
        f"mlx5_{index}",
        state=draw(st.sampled_from(["", "ACTIVE", "active", "DOWN", "INIT"])),
        phys_state=draw(st.sampled_from(["", "LinkUp", "linkup", "Polling", "Disabled"])),
        rate_gbps=draw(st.none() | st.sampled_from([100.0, 400.0, 800.0])),
        counters=counters,
    )
    before = draw(st.none() | st.dictionaries(st.sampled_from(IB_COUNTERS), st.sampled_from([0, 1, 5, 400])))
    return port, (None if before is None else {"counters": before})


@st.composite
def contexts(draw: Any) -> Any:
    gpus = [draw(gpu_readings(i)) for i in range(draw(st.integers(0, 3)))]
    ports = [draw(ib_ports(i)) for i in range(draw(st.integers(0, 2)))]
    disks = draw(st.lists(st.sampled_from([None, True, False]), max_size=2))
    host = draw(
        st.none()
        | st.fixed_dictionaries(
            {
                "edac_uncorrected": COUNTS,
                "disks": st.just([{"device": f"sd{i}", "healthy": h} for i, h in enumerate(disks)]),
                "scheduler": st.none()
                | st.fixed_dictionaries(
                    {"kind": st.sampled_from(["slurm", "none"]), "responsive": FLAGS, "daemon": st.just("slurmd")}
                ),
            }
        )
    )
    xids = draw(st.sampled_from([[], [{"xid": 79, "observed_at": T0.isoformat(), "raw": "NVRM: Xid 79"}]]))
    rep = report(
        T0,
        gpus=[msgspec.to_builtins(g) for g, _ in gpus],
        ib_ports=[p for p, _ in ports],
        host=host,
        xid_events=xids,
        collector_errors=draw(st.sampled_from([{}, {"nvml": "NVML_ERROR_DRIVER_NOT_LOADED"}, {"nvml": ""}])),
    )
    previous_at = draw(st.sampled_from([None, T0 - timedelta(seconds=30), T0, T0 + timedelta(seconds=5)]))
    return {
        "report": rep,
        "previous_report_at": previous_at,
        "previous_gpus": {g.index: prev for g, prev in gpus if prev} | draw(st.sampled_from([{}, {7: {}}])),
        "previous_ib_ports": {(p["device"], p["port"]): before for p, before in ports if before is not None},
        "previous_host": draw(st.none() | st.fixed_dictionaries({"edac_uncorrected": COUNTS})),
        "expected_gpu_count": draw(st.sampled_from([None, 0, 2, 8])),
    }


# Configs an operator could save: thresholds of every sign, the params each rule reads.
THRESHOLDS = st.sampled_from([None, -1.0, 0.0, 1.0, 50.0, 87.0, 1e9])
PARAMS = st.sampled_from(
    [
        {},
        {"use_gpu_limit": False},
        {"mask": 0x4},
        {"mask": "junk"},
        {"limits": {"symbol_error": [-1, 1]}},
        {"limits": {"symbol_error": [0, 0], "link_downed": [1, 60]}},
        {"limits": [1, 2]},
        {"replays_per_lane_per_min": {"5": -1.0}},
        {"replays_per_lane_per_min": {"4": 1.0}},
        {"profile_hca_rate_gbps": 400},
        {"profile_hca_rate_gbps": "fast"},
        {"xids": {"79": {"count": 1}}},
    ]
)


@st.composite
def configs(draw: Any, key: str) -> RuleConfig:
    base = RuleConfig.from_spec(REGISTRY[key])
    if draw(st.booleans()):
        return base
    return replace(base, threshold=draw(THRESHOLDS), params={**base.params, **draw(PARAMS)})


def _conditions(spec: Any, cfg: RuleConfig, ctx: Any) -> list[Any] | None:
    """What the rule yields on the context, or None where it raises (evaluation then drops it)."""
    try:
        if spec.scope == GPU:
            pairs = [(g, ctx.previous_gpus.get(g.index) or {}) for g in ctx.report.gpus]
            return [c for g, prev in pairs for c in spec.fn(cfg, ctx, g, prev)]
        return list(spec.fn(cfg, ctx))
    except Exception:
        return None


SCREENED = sorted(key for key, spec in REGISTRY.items() if spec.fn is not None)


def test_every_rule_run_per_report_has_a_screen():
    assert SCREENED and set(SCREENED) <= set(SCREENS)


@pytest.mark.parametrize("key", SCREENED)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_where_the_screen_sees_nothing_to_do_the_rule_fires_nothing_and_writes_nothing(key, data, node):
    spec, cfg = REGISTRY[key], data.draw(configs(key))
    fields = data.draw(contexts())
    ctx = context(node, fields.pop("report"), **fields)
    screen = ruleconfig._compile_screen(key, cfg)
    if screen is None:
        return  # this config is not screened: the rule always runs
    gpus = [(g, ctx.previous_gpus.get(g.index) or {}) for g in ctx.report.gpus]
    try:
        may_act = screen(ctx, gpus)
    except Exception:
        return  # evaluation then runs the rule
    if may_act:
        return
    with CaptureQueriesContext(connection) as queries:
        conditions = _conditions(spec, cfg, ctx)
    assert not [c for c in conditions or [] if c.state == FIRE], (key, cfg, ctx)
    assert len(queries) == 0, (key, [q["sql"] for q in queries])


# --- End to end: screened and unscreened evaluation reach the same verdicts --------------------


def _faulty_gpu(rng: random.Random, index: int, counters: dict[str, int]) -> dict[str, Any]:
    """A reading of GPU ``index``, healthy or with one fault or gap; ``counters`` carries its
    cumulative counters from report to report (they only grow, or reset to 0)."""
    for name in COUNTER_FIELDS:
        if rng.random() < 0.08:
            counters[name] = counters.get(name, 0) + rng.choice([1, 3, 50, 4_000])
        elif rng.random() < 0.02:
            counters[name] = 0  # a reset
    fields: dict[str, Any] = dict(counters)
    fault = rng.random()
    if fault < 0.35:
        name = rng.choice(list(FAULTS))
        fields[name] = rng.choice(FAULTS[name])
    return gpu(index, **fields)


# GPU field -> faulty, borderline or missing values (threshold crossings, the hysteresis band).
FAULTS: dict[str, list[Any]] = {
    "temperature_c": [84.0, 86.0, 88.0, 90.0, None],
    "hbm_temperature_c": [92.0, 96.0, None],
    "max_operating_temp_c": [None, 0.0, 80.0],
    "hbm_max_operating_temp_c": [None, 90.0],
    "utilization_pct": [0.0, None],
    "clock_event_reasons": [1, 0x8, 0x40, None],
    "ecc_volatile_uncorrected": [0, 1, None],
    "ecc_aggregate_uncorrected": [None],
    "retired_pages_sbe": [10, 70, None],
    "retired_pages_dbe": [60, None],
    "retired_pages_pending": [True, None],
    "remapped_rows_uncorrectable": [100, 600, None],
    "remapped_rows_pending": [True, None],
    "remapped_rows_failure": [True, None],
    "nvlink_links_total": [0, None],
    "nvlink_links_up": [17, None],
    "nvlink_crc_errors": [None],
    "nvlink_replay_errors": [None],
    "nvlink_recovery_errors": [None],
    "pcie_link_gen": [4, None],
    "pcie_link_width": [8, None],
    "pcie_max_link_gen": [None],
    "pcie_max_link_width": [None],
    "pcie_replay_count": [None],
    "recovery_action": [0, 1, 2, 3, 4, None],
}


class Scenario:
    """One node's generated reports, each with the previous-state context ingest would build."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.gpu_counters: list[dict[str, int]] = [{} for _ in range(8)]
        self.ib_counters: list[dict[str, int]] = [dict.fromkeys(IB_COUNTERS, 0) for _ in range(4)]
        self.edac = 0

    def report(self, step: int, at: Any) -> AgentReport:
        rng = self.rng
        gpus = [_faulty_gpu(rng, i, self.gpu_counters[i]) for i in range(8)]
        if rng.random() < 0.05:
            gpus.pop(rng.randrange(8))  # a GPU fell off
        ports = []
        for i, counters in enumerate(self.ib_counters):
            if rng.random() < 0.1:
                name = rng.choice(IB_COUNTERS)
                counters[name] += rng.choice([1, 2, 500, 50_000])
            fields: dict[str, Any] = {"counters": dict(counters)}
            if rng.random() < 0.08:
                fields.update(rng.choice([{"state": "DOWN", "phys_state": "Polling"}, {"rate_gbps": 200.0}]))
            ports.append(ib_port(f"mlx5_{i}", **fields))
        if rng.random() < 0.05:
            self.edac += 1
        host = {
            "edac_uncorrected": self.edac if rng.random() > 0.05 else None,
            "disks": [{"device": "nvme0n1", "healthy": rng.random() > 0.05}],
            "scheduler": {"kind": "slurm", "daemon": "slurmd", "responsive": rng.random() > 0.05},
        }
        extra: dict[str, Any] = {"ib_ports": ports, "host": host}
        if rng.random() < 0.05:
            extra["collector_errors"] = {"nvml": "NVML_ERROR_GPU_IS_LOST"}
        if rng.random() < 0.1:
            xid = rng.choice([13, 31, 48, 79, 94, 154])
            bus = f"0000:{0x53 + rng.randrange(8) * 0x10:02x}:00"
            extra["xid_events"] = [
                {"xid": xid, "observed_at": at.isoformat(), "raw": f"NVRM: Xid (PCI:{bus}): {xid}", "pci_bus_id": bus}
            ]
        rep = report(at, gpus=gpus, **extra)
        return msgspec.structs.replace(rep, report_id=f"s{step}-{at.timestamp():.0f}")


def _feed(node: Any, reports: list[AgentReport], *, screened: bool, batch: int) -> None:
    """``batch`` reports an evaluation, as a node's buffered reports arrive together: an alert
    one report opens must be cleared or held by the next in the same call."""
    contexts = [context(node, rep, last) for rep, last in zip(reports, [None, *reports], strict=False)]
    for start in range(0, len(contexts), batch):
        evaluate_reports(contexts[start : start + batch], screened=screened)


def _verdicts(node: Any) -> dict[str, list[tuple[Any, ...]]]:
    fields = ["rule", "gpu_index", "subject", "severity", "recommended_action", "summary", "evidence"]
    fields += ["xid", "observed_at", "shadow", "source"]
    alert_fields = ["rule", "gpu_index", "subject", "dedupe_key", "severity", "state", "occurrences", "last_seen"]
    alert_fields += ["clearing_since", "resolved_at", "resolved_reason", "summary"]
    return {
        "findings": list(Finding.objects.filter(node=node).order_by("pk").values_list(*fields)),
        "alerts": list(Alert.objects.filter(node=node).order_by("pk").values_list(*alert_fields)),
        "windows": list(RuleWindow.objects.filter(node=node).order_by("rule", "subject").values_list("events")),
    }


EDITED_RULES = {
    "gpu_temperature": {"shadow": True},
    "nvlink_replay_recovery": {"threshold": -1.0},
    "pcie_replay_rate": {"threshold": 5.0},
    "ib_errors_rising": {"params": {"limits": {"symbol_error": [0, 0], "port_rcv_errors": [-1, 1]}}},
    "clock_slowdown": {"params": {"mask": 0x48}},
    "ecc_uncorrectable": {"enabled": False},
}


@pytest.mark.parametrize("batch", [1, 8], ids=["one report a call", "8 reports a call"])
@pytest.mark.parametrize("edited", [False, True], ids=["default rules", "edited rules"])
@pytest.mark.parametrize("seed", range(4))
def test_screened_evaluation_reaches_the_verdicts_of_running_every_rule(db, seed, edited, batch):
    if edited:
        for key, change in EDITED_RULES.items():
            HealthRule.objects.filter(key=key, hardware_profile=None).update(**change)
    ruleconfig.invalidate_cache()
    profile = HardwareProfileFactory()
    twins = [NodeFactory(hardware_profile=profile) for _ in range(2)]
    scenario, at, reports = Scenario(seed), T0, []
    for step in range(40):
        # Mostly the agent's 30 s, sometimes long enough for a clear delay to pass.
        at += timedelta(seconds=scenario.rng.choice([30, 30, 30, 120, 400, 1_000]))
        reports.append(scenario.report(step, at))
    _feed(twins[0], reports, screened=True, batch=batch)
    _feed(twins[1], reports, screened=False, batch=batch)

    screened, everything = _verdicts(twins[0]), _verdicts(twins[1])
    assert everything["findings"], "the scenario must fire something, or it compares nothing"
    assert screened == everything


# --- What screening saves -----------------------------------------------------------------------


def test_a_healthy_report_runs_no_rule_and_sends_no_statement(node, monkeypatch):
    ran: list[str] = []
    for key, spec in list(REGISTRY.items()):
        if spec.fn is not None:

            def counted(*args: Any, _key: str = key, _fn: Any = spec.fn) -> Any:
                ran.append(_key)
                return _fn(*args)

            monkeypatch.setitem(REGISTRY, key, replace(spec, fn=counted))
    ruleconfig.invalidate_cache()
    previous, current = report(T0), report(T0 + timedelta(seconds=30))
    evaluate_reports([context(node, previous)], firing=[])  # warms the rule cache

    ran.clear()
    with CaptureQueriesContext(connection) as queries:
        evaluate_reports([context(node, current, previous)], firing=[])
    assert ran == [] and len(queries) == 0

    evaluate_reports([context(node, current, previous)], firing=[], screened=False)
    assert len(ran) > 100, "unscreened, every rule runs on every GPU"


def test_a_rule_with_an_open_alert_still_runs_on_a_healthy_report_and_clears(node):
    hot = report(T0, gpus=[gpu(0, temperature_c=90.0), *[gpu(i) for i in range(1, 8)]])
    evaluate_reports([context(node, hot)])
    assert Alert.objects.get(node=node, rule="gpu_temperature").state == "firing"

    cool = [report(T0 + timedelta(minutes=m)) for m in (1, 10)]
    evaluate_reports([context(node, cool[0], hot)])
    evaluate_reports([context(node, cool[1], cool[0])])
    assert Alert.objects.get(node=node, rule="gpu_temperature").state == "resolved"


def test_ingest_may_skip_the_rules_only_for_healthy_reports_of_nodes_without_open_alerts(node):
    previous, current = report(T0), report(T0 + timedelta(seconds=30))
    hot = report(T0 + timedelta(seconds=30), gpus=[gpu(0, temperature_c=90.0), *[gpu(i) for i in range(1, 8)]])
    evaluate_reports([context(node, previous)], firing=[])  # the rules are in memory now
    with CaptureQueriesContext(connection) as queries:
        assert reports_are_quiet([context(node, current, previous)], firing=[])
        assert not reports_are_quiet([context(node, hot, previous)], firing=[])
        assert not reports_are_quiet([context(node, current, previous)], firing=None), "open alerts unknown"
        ruleconfig.invalidate_cache()
        assert not reports_are_quiet([context(node, current, previous)], firing=[]), "reading the rules is evaluation's"
    assert len(queries) == 0, "asked outside the rules' savepoint: it must send nothing"

    evaluate_reports([context(node, hot, previous)])
    open_alerts = list(Alert.objects.filter(node=node))
    assert not reports_are_quiet([context(node, current, hot)], firing=open_alerts)
