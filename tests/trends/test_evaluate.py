"""trends.services.evaluate on the planted fleet: exactly the planted nodes are flagged, with
the right evidence; findings are raised once; flags clear when the condition is gone."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.test import override_settings

from health.choices import AlertState
from health.models import Alert, Finding
from nodes.models import Run
from telemetry.models import GpuSample, GpuSampleDaily, GpuSampleHourly
from telemetry.retention import roll_up_and_prune
from trends import collect, services
from trends.choices import FlagKind
from trends.models import TrendFlag, TrendRun

from .conftest import NOW, RUN_DAYS_AGO, flat_telemetry, healthy_busbw, make_nodes, nccl_runs

pytestmark = pytest.mark.django_db


def open_flags() -> set[tuple[str, str, str]]:
    return set(TrendFlag.objects.filter(cleared_at__isnull=True).values_list("node__hostname", "kind", "figure"))


def expected(fleet) -> set[tuple[str, str, str]]:
    return {
        (fleet.degrader.hostname, FlagKind.DEGRADING, "nccl_busbw_gbps"),
        # 3 %/week for 6 weeks leaves it ~18 % under its peers: it is an underperformer too, by now.
        (fleet.degrader.hostname, FlagKind.UNDERPERFORMER, "nccl_busbw_gbps"),
        (fleet.underperformer.hostname, FlagKind.UNDERPERFORMER, "nccl_busbw_gbps"),
        (fleet.lemon.hostname, FlagKind.LEMON, "lemon_score"),
    }


def test_it_flags_exactly_the_planted_nodes(fleet):
    run = services.evaluate(now=NOW)
    assert open_flags() == expected(fleet)
    assert (run.nodes, run.opened, run.refreshed, run.cleared) == (50, 4, 0, 0)


def test_the_degrading_node_carries_its_points_and_a_3_percent_weekly_fall(fleet):
    services.evaluate(now=NOW)
    flag = TrendFlag.objects.get(node=fleet.degrader, kind=FlagKind.DEGRADING)
    ev = flag.evidence
    assert len(ev["points"]) == len(RUN_DAYS_AGO) and ev["n"] == len(RUN_DAYS_AGO)
    assert ev["points"][0][1] == pytest.approx(360, abs=0.5) and ev["points"][-1][1] < 300
    assert ev["share_per_week"] == pytest.approx(-0.03, abs=0.002)
    assert flag.score == pytest.approx(-3.0, abs=0.2) and flag.window_days == 42
    assert ev["line"][0][1] == pytest.approx(360, abs=1)


def test_the_underperformer_is_15_percent_under_its_profiles_median(fleet):
    services.evaluate(now=NOW)
    flag = TrendFlag.objects.get(node=fleet.underperformer, kind=FlagKind.UNDERPERFORMER)
    ev = flag.evidence
    assert ev["peers"] == 50 and ev["profile"] == "trend-h100"
    assert ev["median"] == pytest.approx(360, abs=5)
    assert ev["deficit_pct"] == pytest.approx(15, abs=2) and ev["robust_z"] < -3
    assert sum(ev["histogram"]["counts"]) == 50


def test_the_lemon_scores_its_signals(fleet):
    run = services.evaluate(now=NOW)
    flag = TrendFlag.objects.get(node=fleet.lemon, kind=FlagKind.LEMON)
    signals = flag.evidence["signals"]
    assert {k: signals[k] for k in ("incidents", "xids", "tickets", "rmas", "out_count", "hours_out")} == {
        "incidents": 6,
        "xids": 9,
        "tickets": 2,
        "rmas": 0,
        "out_count": 2,
        "hours_out": 48,
    }
    assert flag.score >= 40 and flag.score == pytest.approx(sum(flag.evidence["contributions"].values()), abs=0.05)
    # The run keeps the top offenders: the lemon first, the healthy nodes' noise far below it.
    assert run.top_lemons[0]["hostname"] == fleet.lemon.hostname and run.top_lemons[0]["flagged"]
    assert all(row["score"] < 30 and not row["flagged"] for row in run.top_lemons[1:])


def test_application_xids_do_not_count(fleet):
    services.evaluate(now=NOW)
    noisy = fleet.healthy[2]  # planted with XIDs 13, 31 and 43 only
    run = TrendRun.objects.get()
    assert noisy.hostname not in {row["hostname"] for row in run.top_lemons}


def test_findings_go_the_road_of_every_signal(fleet):
    services.evaluate(now=NOW)
    findings = {
        (f.node_id, f.rule, f.severity, f.subject, f.recommended_action, f.source) for f in Finding.objects.all()
    }
    assert findings == {
        (fleet.degrader.pk, "trend_degrading", "warning", "nccl_busbw_gbps", "none", "trends"),
        (fleet.degrader.pk, "peer_underperformer", "degraded", "nccl_busbw_gbps", "none", "trends"),
        (fleet.underperformer.pk, "peer_underperformer", "degraded", "nccl_busbw_gbps", "none", "trends"),
        (fleet.lemon.pk, "lemon_node", "degraded", "lemon_score", "none", "trends"),
    }
    assert all(f.finding_id for f in TrendFlag.objects.all())
    assert Alert.objects.filter(state=AlertState.FIRING).count() == 4


def test_running_again_raises_nothing_twice(fleet):
    services.evaluate(now=NOW)
    again = services.evaluate(now=NOW + timedelta(hours=24))
    assert (again.opened, again.refreshed, again.cleared) == (0, 4, 0)
    assert Finding.objects.count() == 4 and TrendFlag.objects.count() == 4
    assert open_flags() == expected(fleet)
    assert TrendFlag.objects.filter(updated=NOW + timedelta(hours=24)).count() == 4


def test_flags_clear_and_alerts_resolve_when_the_condition_is_gone(fleet):
    services.evaluate(now=NOW)
    # Two months on: every node has six fresh, healthy weeks of NCCL runs (the degrader and the
    # underperformer were repaired) and the lemon's incidents are older than the lemon window.
    later = NOW + timedelta(days=60)
    rng = random.Random(11)
    Run.objects.bulk_create([run for node in fleet.nodes for run in nccl_runs(node, healthy_busbw(rng), now=later)])
    run = services.evaluate(now=later)
    assert (run.opened, run.cleared) == (0, 4)
    assert open_flags() == set()
    assert TrendFlag.objects.filter(cleared_at=later).count() == 4
    assert not Alert.objects.filter(state=AlertState.FIRING).exists()
    assert Finding.objects.count() == 4  # clearing raises nothing


def test_a_flag_holds_while_the_figure_stays_near_its_threshold(fleet):
    services.evaluate(now=NOW)
    # A week on, the underperformer's new run is 9 % under: past 75 % of the 10 % threshold, the flag stays.
    later = NOW + timedelta(days=7)
    Run.objects.bulk_create(nccl_runs(fleet.underperformer, [360 * 0.91], now=later, days_ago=(0.2,)))
    run = services.evaluate(now=later)
    assert (fleet.underperformer.hostname, FlagKind.UNDERPERFORMER, "nccl_busbw_gbps") in open_flags()
    assert run.opened == 0


def test_the_lemon_finding_asks_for_repair_past_the_repair_score(fleet, settings):
    settings.NODEWARDEN_LEMON_REPAIR_SCORE = 45
    services.evaluate(now=NOW)
    finding = Finding.objects.get(rule="lemon_node")
    assert finding.recommended_action == "inspect"
    assert TrendFlag.objects.get(kind=FlagKind.LEMON).evidence["recommended_action"] == "inspect"


def test_a_lemon_crossing_the_repair_score_later_is_raised_again_for_repair(fleet, settings):
    services.evaluate(now=NOW)
    assert Finding.objects.get(rule="lemon_node").recommended_action == "none"
    settings.NODEWARDEN_LEMON_REPAIR_SCORE = 45.0
    services.evaluate(now=NOW + timedelta(hours=1))
    findings = list(Finding.objects.filter(rule="lemon_node").order_by("created", "id"))
    assert [f.recommended_action for f in findings] == ["none", "inspect"]
    flag = TrendFlag.objects.get(kind=FlagKind.LEMON)
    assert flag.finding_id == findings[-1].pk
    assert list(Alert.objects.filter(rule="lemon_node").values_list("state", flat=True).order_by("id")) == [
        AlertState.RESOLVED,
        AlertState.FIRING,
    ]
    services.evaluate(now=NOW + timedelta(hours=2))
    assert Finding.objects.filter(rule="lemon_node").count() == 2


def test_decommissioned_nodes_are_left_out_and_their_flags_cleared(fleet):
    from nodes.choices import NodeState
    from nodes.models import Node

    services.evaluate(now=NOW)
    Node.objects.filter(pk=fleet.lemon.pk).update(state=NodeState.DECOMMISSIONED)
    run = services.evaluate(now=NOW + timedelta(hours=1))
    assert run.nodes == 49 and not TrendFlag.objects.filter(node=fleet.lemon, cleared_at__isnull=True).exists()


def roll_old_hours_into_days() -> None:
    """The retention beat at NOW with a 15-day hourly window: the fixtures' hours older than that
    (16 to 42 days) become daily rows; raw samples stay raw (a 20-day raw window)."""
    with override_settings(TELEMETRY_RAW_RETENTION_DAYS=20, TELEMETRY_HOURLY_RETENTION_DAYS=15):
        assert roll_up_and_prune(now=NOW).finished
    assert GpuSampleDaily.objects.exists() and not GpuSampleHourly.objects.filter(hour__lt=NOW - timedelta(days=16))


def test_the_planted_verdicts_hold_once_old_hours_are_days(fleet):
    roll_old_hours_into_days()
    services.evaluate(now=NOW)
    assert open_flags() == expected(fleet)


def planted_telemetry() -> tuple:
    nodes = make_nodes(8, prefix="tele")
    climbing, creeping, flat = nodes[0], nodes[1], nodes[2:]
    rng = random.Random(2)
    hourly, raw = [], []
    for node, kwargs in [(climbing, {"ecc": lambda d: 100 + 40 * d}), (creeping, {"temp": lambda d: 62 + d / 7})] + [
        (n, {}) for n in flat
    ]:
        h, r = flat_telemetry(node, rng=rng, **kwargs)
        hourly += h
        raw += r
    GpuSampleHourly.objects.bulk_create(hourly)
    GpuSample.objects.bulk_create(raw)
    return climbing, creeping


@pytest.mark.parametrize("old_hours_as_days", [False, True], ids=["hourly", "daily"])
def test_telemetry_counters_and_temperature_at_load_are_trended(db, old_hours_as_days):
    climbing, creeping = planted_telemetry()
    if old_hours_as_days:  # the same verdicts and evidence once retention thinned the old hours to days
        roll_old_hours_into_days()
    services.evaluate(now=NOW)
    assert open_flags() == {
        (climbing.hostname, FlagKind.DEGRADING, "ecc_corrected"),
        (creeping.hostname, FlagKind.DEGRADING, "temperature_at_load"),
    }
    ecc = TrendFlag.objects.get(figure="ecc_corrected").evidence
    # Counters add up over GPUs: GPU 0 climbs 40 a day (280 a week), GPU 1 holds at 3.
    assert ecc["per_week"] == pytest.approx(280, rel=0.02) and ecc["points"][0][1] == 103
    assert len(ecc["points"]) == 42  # 28 days of hourly roll-ups + 14 days of raw samples, one point a day
    temp = TrendFlag.objects.get(figure="temperature_at_load")
    assert temp.score == pytest.approx(1.0, abs=0.15) and temp.evidence["unit"] == "degC"


def test_the_daily_telemetry_series_are_the_same_read_from_hours_or_days(db):
    planted_telemetry()
    rows = collect.nodes()

    def series() -> dict:
        batch = collect.read_batch(
            rows, now=NOW, trend_since=NOW - timedelta(days=42), lemon_since=NOW - timedelta(days=30), app_xids=[]
        )
        return dict(batch.series)

    from_hours = series()
    roll_old_hours_into_days()
    from_days = series()
    assert from_days.keys() == from_hours.keys() and len(from_days) == 8 * 3
    for key, points in from_hours.items():
        assert [t for t, _ in from_days[key]] == [t for t, _ in points]
        # Readings are 4-byte floats: a day's temperature under load is stored to 7 digits.
        assert [v for _, v in from_days[key]] == pytest.approx([v for _, v in points], rel=1e-6)


def test_runs_with_other_parameters_are_not_compared(fleet):
    # A 4-GPU NCCL run on an 8-GPU node measures half the bus: not a figure of the node's health.
    node = fleet.healthy[0]
    half = nccl_runs(node, [150.0], days_ago=(0.1,))[0]
    half.params = {"min_bytes": 8, "max_bytes": 8 * 1024**3, "gpus": 4}
    half.save()
    services.evaluate(now=NOW)
    assert open_flags() == expected(fleet)


def test_gpu_stress_tflops_are_trended_and_compared_too(db):
    nodes = make_nodes(8, prefix="gs")
    rng = random.Random(4)
    runs = []
    for i, node in enumerate(nodes):
        for w, ago in enumerate(RUN_DAYS_AGO):
            value = 700 * (1 - 0.04 * w) if i == 0 else 700 * (1 + rng.uniform(-0.01, 0.01))
            at = NOW - timedelta(days=ago)
            runs.append(
                Run(
                    node=node,
                    kind="gpu_stress",
                    status="passed",
                    created=at,
                    finished=at,
                    params={"seconds": 60, "matrix_size": 8192, "dtype": "bf16", "min_tflops": 0.0},
                    figures={"min_tflops": value, "gpu0_tflops": value},
                )
            )
    Run.objects.bulk_create(runs)
    services.evaluate(now=NOW)
    assert open_flags() == {
        (nodes[0].hostname, FlagKind.DEGRADING, "gpu_min_tflops"),
        (nodes[0].hostname, FlagKind.UNDERPERFORMER, "gpu_min_tflops"),
    }


def test_training_step_throughput_of_the_default_workload_is_trended(db):
    nodes = make_nodes(4, prefix="ts")
    runs = []
    for i, node in enumerate(nodes):
        for w, ago in enumerate(RUN_DAYS_AGO):
            at = NOW - timedelta(days=ago)
            falling = 50_000 * (1 - 0.04 * w)
            for workload, value in (("tiny-train", falling if i == 0 else 50_000.0), ("llama-step", 900.0 + 100 * w)):
                runs.append(
                    Run(
                        node=node,
                        kind="training_step",
                        status="passed",
                        created=at,
                        finished=at,
                        params={"workload": workload},
                        figures={"samples_per_s": value, "loss": 1.1, "loss_finite": 1.0},
                    )
                )
    Run.objects.bulk_create(runs)
    services.evaluate(now=NOW)
    # One line per node: the other workload's (rising) figures are not mixed into it.
    assert open_flags() == {(nodes[0].hostname, FlagKind.DEGRADING, "training_samples_per_s")}


def test_a_failed_run_says_why_and_stays_unfinished(fleet, monkeypatch):
    from trends import collect

    def broken():
        raise RuntimeError("database went away")

    monkeypatch.setattr(collect, "nodes", broken)
    with pytest.raises(RuntimeError):
        services.evaluate(now=NOW)
    run = TrendRun.objects.get()
    assert run.finished is None and run.error == "RuntimeError: database went away"
