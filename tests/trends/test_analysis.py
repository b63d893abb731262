"""trends.analysis: least squares, trends, peers and lemon scores over plain numbers."""

from __future__ import annotations

import math
import random

import pytest

from trends import analysis
from trends.analysis import TREND_SPECS


def weekly(values: list[float]) -> list[tuple[float, float]]:
    return [(7.0 * i, v) for i, v in enumerate(values)]


def test_least_squares_recovers_a_line():
    fit = analysis.least_squares([(0, 10), (1, 12), (2, 14), (3, 16)])
    assert fit is not None
    assert fit.slope == pytest.approx(2.0) and fit.intercept == pytest.approx(10.0)
    assert fit.r2 == pytest.approx(1.0) and math.isinf(fit.t)


def test_least_squares_needs_two_distinct_days():
    assert analysis.least_squares([(1, 5)]) is None
    assert analysis.least_squares([(1, 5), (1, 7)]) is None


def test_bandwidth_falling_3_percent_a_week_is_degrading():
    found = analysis.trend(TREND_SPECS["nccl_busbw_gbps"], weekly([360 * (1 - 0.03 * w) for w in range(7)]))
    assert found is not None and found.degrading
    assert found.share_per_week == pytest.approx(-0.03, abs=1e-9)
    assert found.ratio == pytest.approx(1.5)


def test_bandwidth_falling_1_percent_a_week_is_not():
    found = analysis.trend(TREND_SPECS["nccl_busbw_gbps"], weekly([360 * (1 - 0.01 * w) for w in range(7)]))
    assert found is not None and not found.degrading and found.ratio == pytest.approx(0.5)


def test_noise_alone_is_never_a_trend():
    rng = random.Random(3)
    spec = TREND_SPECS["nccl_busbw_gbps"]
    for _ in range(200):
        found = analysis.trend(spec, weekly([360 * (1 + rng.uniform(-0.015, 0.015)) for _ in range(7)]))
        assert found is not None and not found.degrading


def test_a_steep_but_noisy_fall_on_few_points_is_not_significant():
    # Three runs, one of them an outlier: the slope is steep but not clear of the noise.
    found = analysis.trend(TREND_SPECS["nccl_busbw_gbps"], [(0, 360), (10, 300), (20, 350)])
    assert found is not None and not found.significant and not found.degrading


def test_a_rising_bandwidth_is_no_degradation():
    found = analysis.trend(TREND_SPECS["nccl_busbw_gbps"], weekly([300 + 5 * w for w in range(7)]))
    assert found is not None and found.ratio < 0 and not found.degrading


def test_counters_climbing_past_their_weekly_threshold_are_degrading():
    ecc = analysis.trend(TREND_SPECS["ecc_corrected"], [(d, 1000 + 30 * d) for d in range(0, 30, 2)])
    assert ecc is not None and ecc.degrading and ecc.per_week == pytest.approx(210)
    rows = analysis.trend(TREND_SPECS["remapped_rows"], [(d, 4.0) for d in range(0, 30, 2)])
    assert rows is not None and not rows.degrading and rows.ratio == 0


def test_temperature_creeping_at_load_is_degrading():
    rng = random.Random(1)
    found = analysis.trend(
        TREND_SPECS["temperature_at_load"], [(d, 65 + d / 7 + rng.uniform(-0.3, 0.3)) for d in range(42)]
    )
    assert found is not None and found.degrading and found.per_week == pytest.approx(1.0, abs=0.1)


def test_peer_stats_are_the_median_and_the_mad():
    stats = analysis.peer_stats([1, 2, 3, 4, 100])
    assert stats == analysis.PeerStats(n=5, median=3, mad=1)
    assert analysis.peer_stats([1, 2, 3, 4]) is None  # fewer than PEER_MIN_NODES


def test_a_node_15_percent_below_the_median_underperforms():
    rng = random.Random(5)
    peers = [360 * (1 + rng.uniform(-0.015, 0.015)) for _ in range(49)] + [306.0]
    stats = analysis.peer_stats(peers)
    verdict = analysis.compare_to_peers(306.0, stats)
    assert verdict.below and verdict.deficit == pytest.approx(0.15, abs=0.01) and verdict.robust_z < -3
    assert not any(analysis.compare_to_peers(v, stats).below for v in peers[:-1])


def test_a_widely_scattered_profile_does_not_flag_its_slow_half():
    # 12 % under the median, but the peers scatter +-20 %: not an outlier (z > -3).
    peers = [300, 320, 340, 360, 380, 400, 420, 440, 460]
    verdict = analysis.compare_to_peers(334.4, analysis.peer_stats(peers))
    assert verdict.deficit > analysis.PEER_THRESHOLD and not verdict.below


def test_identical_peers_flag_any_node_past_the_threshold():
    stats = analysis.peer_stats([100.0] * 9)
    assert analysis.compare_to_peers(85.0, stats).below
    assert not analysis.compare_to_peers(95.0, stats).below


def test_histogram_counts_every_value_once():
    hist = analysis.histogram([1, 2, 2, 3, 10], bins=3)
    assert sum(hist["counts"]) == 5 and len(hist["edges"]) == 4
    assert hist["counts"] == [4.0, 0.0, 1.0]
    assert analysis.histogram([]) == {"edges": [], "counts": []}


def test_a_healthy_node_scores_zero():
    assert analysis.lemon_score({}).score == 0


def test_the_lemon_score_adds_up_its_contributions_and_saturates():
    score = analysis.lemon_score({"incidents": 6, "incident_rate": 6, "xids": 9, "tickets": 2})
    assert score.score == pytest.approx(sum(score.contributions.values()))
    assert score.score >= analysis.LEMON_THRESHOLD
    assert analysis.lemon_score(dict.fromkeys((s.name for s in analysis.LEMON_SIGNALS), 1e9)).score == pytest.approx(
        100, abs=1e-3
    )


def test_xids_alone_do_not_make_a_lemon():
    assert analysis.lemon_score({"xids": 500}).score < analysis.LEMON_THRESHOLD


def test_a_node_with_one_incident_and_one_xid_is_far_from_a_lemon():
    assert analysis.lemon_score({"incidents": 1, "incident_rate": 1, "xids": 1}).score < 20


def test_top_offenders_rank_by_score_and_leave_out_zeros():
    scores = {
        1: analysis.lemon_score({"xids": 1}),
        2: analysis.lemon_score({"incidents": 5}),
        3: analysis.lemon_score({}),
    }
    assert [pk for pk, _ in analysis.top_offenders(scores)] == [2, 1]


def test_repeats_are_incidents_within_72_hours_of_the_previous_one():
    assert analysis.repeats([0, 24, 200, 300, 310]) == 2
    assert analysis.repeats([]) == 0


def test_out_of_production_counts_outages_and_their_hours():
    # Out at hour 10 (triage), Day 1 re-validation from 20 (still out), production at 34; out again at 90.
    out = analysis.out_of_production(False, [(10, True), (20, None), (34, False), (90, True)], end=100)
    assert out.count == 2 and out.hours == pytest.approx(24 + 10)


def test_a_node_out_when_the_window_starts_counts_from_the_start_but_not_as_a_new_outage():
    out = analysis.out_of_production(True, [(5, False)], end=100)
    assert out.count == 0 and out.hours == pytest.approx(5)
