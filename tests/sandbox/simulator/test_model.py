"""The simulator's pure parts: published rates, what cures what, the synchronous job's ETTR."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from sandbox.simulator import faults as F
from sandbox.simulator.workload import RESTARTING, RUNNING, WAITING, SyncJob

T0 = datetime(2026, 1, 5, tzinfo=UTC)
HOSTS = {f"n{i}" for i in range(10)}


def test_the_rates_are_the_llama3_table_per_node_day():
    total = sum(f.per_node_day for f in F.FAULTS)
    assert total == pytest.approx(419 / (2048 * 54))  # 3.79 per 1000 node-days
    assert total * 1000 == pytest.approx(3.79, abs=0.005)
    assert F.BY_KEY["faulty_gpu"].per_node_day * 1000 == pytest.approx(1.338, abs=0.001)  # the reference's column
    assert all(abs(sum(share for _, share in f.cures) - 1) < 1e-9 for f in F.FAULTS)


def test_cures_follow_the_ladder():
    assert F.rung_cures("reboot", F.REBOOT)
    assert F.rung_cures("power_cycle", F.REBOOT)  # further up cures what a reboot cures
    assert not F.rung_cures("reboot", F.POWER_CYCLE)
    assert not F.rung_cures("reimage", F.REPAIR)
    assert F.rung_cures("repair", F.RMA)  # a technician on site fixes the node (opens the return himself)
    assert F.rung_cures("gpu_reset", F.RESET)
    assert F.rung_cures("reboot", F.RESTART_JOB)


def test_draws_are_seeded_and_follow_the_shares():
    fault = F.BY_KEY["faulty_gpu"]
    draws = [fault.draw_cure(random.Random(i)) for i in range(2000)]
    assert 0.35 < draws.count(F.POWER_CYCLE) / len(draws) < 0.45
    assert set(draws) == {F.POWER_CYCLE, F.RMA}
    assert fault.draw_cure(random.Random(7)) == fault.draw_cure(random.Random(7))


def test_a_job_keeps_its_checkpoints_and_loses_the_rest():
    job = SyncJob(size=8, checkpoint_interval=timedelta(minutes=20), restart_cost=timedelta(minutes=10))
    job.advance(T0, HOSTS)
    assert job.state == RUNNING and len(job.members) == 8
    member = min(job.members)
    hit = job.interrupt(T0 + timedelta(minutes=50), member, "faulty_gpu")
    assert hit is not None and hit.lost == timedelta(minutes=10)  # two checkpoints kept, 10 minutes lost
    assert job.kept == timedelta(minutes=40) and job.state == RESTARTING
    assert job.interrupt(T0 + timedelta(minutes=51), member, "again") is None  # not running: nothing to lose
    job.advance(T0 + timedelta(minutes=60), HOSTS)  # restart took 10 minutes, then runs again
    assert job.state == RUNNING and job.restarting == timedelta(minutes=10)
    job.finish(T0 + timedelta(minutes=100))
    assert job.kept == timedelta(minutes=80)
    assert job.ettr(timedelta(minutes=100)) == pytest.approx(0.8)


def test_a_job_waits_without_enough_usable_nodes():
    job = SyncJob(size=8, checkpoint_interval=timedelta(minutes=20), restart_cost=timedelta(0))
    job.advance(T0, set(sorted(HOSTS)[:5]))
    assert job.state == WAITING
    job.advance(T0 + timedelta(hours=1), HOSTS)
    assert job.state == RUNNING and job.waited == timedelta(hours=1)
    assert job.interrupt(T0 + timedelta(hours=2), "not-a-member", "x") is None
