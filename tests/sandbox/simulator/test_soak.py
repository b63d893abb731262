"""Soak: every fault class (and every noise signal) on a small fleet, with the real remediation,
rules and re-validation, the simulated scheduler and the Redfish emulator; the fleet auditor runs
at every simulated hour and at the end, and must find no breach (issue 13, "Trust the loop").

Every (class, cure) pair of ``simulator.faults`` is planted once, staggered over the first two
days on 16 nodes, so each class is seen whatever the seed; random arrivals are off. The
scheduler is the simulator's own (``sandbox.simulator.scheduler``): real Slurm cannot follow the
simulated clock (its job times and drain states run on the wall clock); the auditor's scheduler
invariant against real Slurm is tested in tests/schedulers/test_audit.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sandbox.simulator import faults as F
from sandbox.simulator.engine import SimConfig, Simulation
from sandbox.simulator.report import breaches_line, build

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit follow-ups run as in production
NODES = 16


@pytest.fixture(autouse=True)
def _sushy(sushy):
    """Every test here runs the Redfish emulators."""


def every_fault() -> list[tuple[str, str]]:
    """Each (class, cure) once: a faulty GPU that a power cycle cures and one that needs an RMA, ..."""
    return [(f.key, cure) for f in F.FAULTS for cure, _ in f.cures] + [(f.key, "") for f in F.NOISE]


def soak() -> tuple[Simulation, dict]:
    config = SimConfig(
        nodes=NODES,
        days=3.0,
        rate_scale=0,
        noise_scale=0,
        repair_hours=(3, 6),
        rma_days=(0.5, 1),
        nodes_per_emulator=NODES,
        seed=13,
    )
    sim = Simulation(config)
    for i, (key, cure) in enumerate(every_fault()):
        # 1 h 45 min apart, round the fleet: a node meets its next fault a day later, back in production.
        sim.plant(timedelta(minutes=30 + 105 * i), key, sim.hostname(i % NODES), cure=cure or None, gpu=i % 8)
    sim.run()
    return sim, build(sim, wall_seconds=1.0, policy_about="default")


def test_every_fault_class_soaks_with_no_audit_breach():
    sim, report = soak()
    seen = {f.fault.key for f in sim.ledger.faults}
    assert seen == set(F.BY_KEY), f"fault classes not seen: {set(F.BY_KEY) - seen}"
    assert report["run"]["task_errors"] == [] and report["run"]["agent_errors"] == []
    audit = report["audit"]
    assert audit["runs"] >= 72  # every simulated hour, and the end
    assert audit["distinct"] == 0 and audit["at_end"] == {}, (
        breaches_line(report) + "\n" + json.dumps(audit["examples"], indent=1, default=str)
    )
