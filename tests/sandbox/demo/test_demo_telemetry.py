"""Demo telemetry: the demo fleet's agents report through the real ingest, and injected
faults come out as findings and alerts from the real health rules."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command

from health.choices import Severity
from health.models import Alert, Finding
from sandbox import demo
from sandbox.demo.telemetry import REPORTING_STATES, report_demo_telemetry
from sandbox.simulator.models import LiveFault
from telemetry.models import GpuState, NodeHealth

SEEDED_AT = datetime(2026, 3, 14, 15, 30, tzinfo=UTC)
NOW = SEEDED_AT + timedelta(days=1)

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(settings):
    settings.NODEWARDEN_DEMO_CHURN = True
    with time_machine.travel(SEEDED_AT, tick=False):
        call_command("seed_demo", "--nodes", "24", "--days", "30", "--seed", "7", stdout=io.StringIO())
    return list(demo.demo_nodes().filter(state__in=REPORTING_STATES).order_by("id"))


def tick(at: datetime = NOW) -> str:
    with time_machine.travel(at, tick=False):
        return report_demo_telemetry()


def test_it_does_nothing_unless_the_demo_is_on(fleet, settings):
    settings.NODEWARDEN_DEMO_CHURN = False
    assert tick() == "disabled"
    assert not NodeHealth.objects.exists()


def plant(node, fault: str, *, gpu: int = 0, at: datetime = NOW, **kwargs) -> LiveFault:
    return LiveFault.objects.create(node=node, fault=fault, gpu=gpu, started=at, **kwargs)


def test_every_reporting_demo_node_reports_with_its_eight_gpus(fleet):
    seeded = Finding.objects.count()  # the seeded history's own
    assert tick() == f"{len(fleet)} reports"
    assert NodeHealth.objects.filter(node__in=fleet, last_report_at=NOW).count() == len(fleet)
    assert GpuState.objects.filter(node__in=fleet).count() == 8 * len(fleet)
    assert Finding.objects.count() == seeded  # a healthy fleet raises nothing


def test_a_gpu_fallen_off_the_bus_becomes_a_catastrophic_finding_on_that_gpu(fleet):
    victim = fleet[0]
    tick(NOW - timedelta(seconds=30))  # a healthy report first: the portal learns which bus is GPU 3
    plant(victim, "faulty_gpu", gpu=3, xid=79, cure="power_cycle")
    tick(NOW)  # GPU 3 is gone from NVML and the kernel printed XID 79 for its bus
    finding = Finding.objects.get(node=victim, xid=79)
    assert (finding.gpu_index, finding.severity) == (3, Severity.CATASTROPHIC)
    assert victim.events.filter(kind="finding").exists()
    assert LiveFault.objects.get(node=victim).announced  # the XID line is printed once


def test_a_hot_gpu_alert_fires_then_resolves_when_the_heat_goes_away(fleet):
    victim = fleet[0]
    plant(victim, "thermal", gpu=5, ends=NOW + timedelta(minutes=20))  # ends: a passing signal
    tick(NOW)
    alert = Alert.objects.get(node=victim, rule="gpu_temperature")
    assert (alert.gpu_index, alert.state) == (5, "firing")
    for minutes in range(20, 40):  # cool reports for long enough to outlast any hysteresis delay
        tick(NOW + timedelta(minutes=minutes))
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_a_dead_host_sends_nothing(fleet):
    plant(fleet[0], "psu", cure="repair")
    assert tick() == f"{len(fleet) - 1} reports"
    assert not NodeHealth.objects.filter(node=fleet[0]).exists()


def test_a_node_out_of_production_keeps_reporting_so_no_heartbeat_finding_fires(fleet):
    """A node in remediation or repair is powered and its agent reports: when it comes back to a
    state the heartbeat rule watches, its last report is fresh, not from before it left."""
    from health.tasks import check_heartbeats
    from nodes import services
    from nodes.choices import NodeState as S

    node = next(n for n in fleet if n.state == S.PRODUCTION)
    tick(NOW)
    actor = services.Actor.system("test")  # the test plays the engine: cordon, a rung, back to Day 1
    services.cordon(node.pk, actor=actor, reason="test: a fault")
    services.start_remediation(node.pk, actor=actor, reason="test: a rung")
    tick(NOW + timedelta(minutes=10))  # the rung runs for ten minutes; the agent still reports
    with time_machine.travel(NOW + timedelta(minutes=10, seconds=20), tick=False):
        services.revalidate(node.pk, actor=actor, reason="test: rung done")
        check_heartbeats()
    assert not Finding.objects.filter(node=node, rule="heartbeat_missing").exists()


def test_production_nodes_run_whole_node_jobs_and_a_share_is_idle_for_a_while():
    from datetime import UTC, datetime, timedelta

    from sandbox.demo.telemetry import demo_report, node_has_job

    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    hosts = [f"iad1-a-{i:03}" for i in range(400)]
    idle = [h for h in hosts if not node_has_job(h, now)]
    assert 0.12 < len(idle) / len(hosts) < 0.28  # IDLE_SHARE, not 0.8 ** 8 per-GPU coin flips
    for host in hosts[:20]:
        processes = {g["compute_processes"] for g in demo_report(0, host, now, state="production")["gpus"]}
        assert processes == ({0} if host in idle else {1})  # one job on every GPU, or none on any
    later = now + timedelta(seconds=30)
    assert sum(node_has_job(h, now) != node_has_job(h, later) for h in hosts) < 40  # stable over a report
