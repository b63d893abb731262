"""End to end: planted faults in a small simulated fleet, and what the real system did about them.

Nothing is mocked: the virtual agents post through the agent API, the real rules raise
findings, the default policies pick the urgency and the rung, the ladder reaches the BMCs
on a real Redfish emulator (sushy-tools), re-validation asks the agents for active checks,
and a simulated technician resolves the repair ticket. The clock is simulated (time_machine).
Random faults are switched off (rate and noise scale 0) so that each planted fault's road is
known: a faulty GPU that a reboot does not cure but a power cycle does; HBM memory that only a
technician cures; an InfiniBand link that flaps once (nothing wrong: acting on it is a false
action); a failing SSD, whose warning-level finding the default policy only watches, so the
job keeps dying on it until an operator steps in.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from remediation.models import Remediation, RemediationStep
from sandbox.simulator import faults as F
from sandbox.simulator.engine import SimConfig, Simulation
from sandbox.simulator.report import build, render, render_side_by_side

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit follow-ups run as in production


@pytest.fixture(autouse=True)
def _sushy(sushy):
    """Every test here runs the Redfish emulators."""


def planted_run(policy: str = "default") -> tuple[Simulation, dict]:
    config = SimConfig(
        nodes=12, days=1.25, rate_scale=0, noise_scale=0, repair_hours=(3, 3), policy=policy, nodes_per_emulator=6
    )
    sim = Simulation(config)
    sim.plant(timedelta(hours=1), "faulty_gpu", "sim-00001", cure=F.POWER_CYCLE, gpu=3)
    sim.plant(timedelta(hours=2), "hbm", "sim-00002", cure=F.RMA, gpu=5, xid=48)
    sim.plant(timedelta(minutes=20), "link_flap", "sim-00003")  # while the job runs on every node
    sim.plant(timedelta(hours=4), "ssd", "sim-00004", cure=F.REPAIR)
    sim.run()
    return sim, build(sim, wall_seconds=1.0, policy_about=policy)


def test_planted_faults_take_their_roads_through_the_real_system():
    sim, report = planted_run()
    assert report["run"]["agent_errors"] == [] and report["run"]["task_errors"] == []
    cures = {(host, key): by for host, key, by, _ in sim.ledger.cures}

    # XID 79: cordoned at once (the job it crashed is interrupted), rebooted, failed the burn-in
    # (the GPU still falls off the bus), climbed to a BMC power cycle, passed, back in production.
    assert cures[("sim-00001", "faulty_gpu")] == "rung power_cycle"
    steps = list(
        RemediationStep.objects.filter(remediation__node__hostname="sim-00001")
        .order_by("started")
        .values_list("rung", "status")
    )
    assert ("reboot", "failed") in steps and ("power_cycle", "passed") in steps  # only a cure passes a step
    assert "reimage" not in [rung for rung, _ in steps]
    assert Remediation.objects.get(node__hostname="sim-00001").status == "succeeded"

    # HBM needing a new GPU: every automated rung fails re-validation, then a technician fixes it.
    assert cures[("sim-00002", "hbm")] == "technician"
    # Its reimage: reinstalled, the agent rejoined with the user-data's join token (the action done),
    # re-validation failed again (its success check: the step failed), and the ladder climbed to a technician.
    steps = dict(RemediationStep.objects.filter(remediation__node__hostname="sim-00002").values_list("rung", "status"))
    reimage = RemediationStep.objects.get(remediation__node__hostname="sim-00002", rung="reimage")
    assert steps.get("reimage") == "failed" and reimage.acted_at is not None and "rejoined" in reimage.detail, steps
    assert report["actions"]["repair_tickets"] >= 1 and report["actions"]["repairs_resolved"] >= 1

    # The flap: one degraded finding on a healthy node; its drain waits for the job, the port is
    # back meanwhile, so the remediation stands down: no false action.
    assert report["false_actions"]["count"] == 0 and report["false_actions"]["stood_down"] == 1

    # The SSD: watched, never taken out by Nodewarden; the restarted job dies on it until a person steps in.
    assert report["mttr"]["never_taken_out"] == {"ssd": 1}
    assert [(h, fault) for h, fault, _ in sim.ledger.manual] == [("sim-00004", "ssd")]
    assert report["job"]["by_cause"]["SSD"] == 3  # the first crash and two restarts on it

    assert report["job"]["by_cause"]["Faulty GPU"] == 1 and report["job"]["by_cause"]["GPU HBM3 Memory"] == 1
    assert report["mttr"]["by_cause"]["Faulty GPU"]["count"] == 1
    assert 0 < report["job"]["ettr"] < 1
    assert report["states"]["out_of_production_max"] >= 1  # hourly samples saw a node out
    assert sum(v for k, v in report["states"]["hourly"][-1].items() if k != "at") == 12
    text = render(report)
    assert "Faulty GPU" in text and "false actions" in text


def test_the_aggressive_policy_evicts_the_job_for_a_flap_and_compares_side_by_side():
    _, default = planted_run("default")
    call_command("flush", interactive=False, verbosity=0)  # each run gets a database of its own
    _, aggressive = planted_run("aggressive")
    assert default["false_actions"]["count"] == 0 and default["job"]["evicted_by_nodewarden"] == 0
    # Degraded means "cordon now" there: the flap takes its node out and kills the running job.
    assert aggressive["false_actions"]["by_rule"] == {"ib_port_down": 1}
    assert aggressive["job"]["evicted_by_nodewarden"] == 1
    text = render_side_by_side(default, aggressive)
    assert "default" in text and "aggressive" in text and "false actions" in text
