"""The fabric's periodic tasks: the agents' HCA counters become counter snapshots (and a
ticket when errors rise); the collector stays off unless configured."""

from __future__ import annotations

import msgspec
import pytest
import time_machine
from django.utils import timezone

from fabric.choices import DiscrepancyKind, RunSource
from fabric.models import DiscoveryRun, PortCounterSnapshot, Ticket
from fabric.plan import import_plan
from fabric.tasks import collect_fabric, record_agent_counters
from nodes.services import Actor
from telemetry.ingest import ingest_reports
from telemetry.schema import AgentReport
from telemetry.testing import make_report
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def report(node, symbol_errors: int, at):
    data = make_report(node.hostname, collected_at=at, seed=int(at.timestamp()))
    data["ib_ports"][2]["counters"]["symbol_error"] = symbol_errors
    ingest_reports(node.pk, [msgspec.convert(data, AgentReport)])


def test_agent_counters_of_planned_hcas_are_recorded_and_rising_errors_open_a_ticket():
    node = NodeFactory(hostname="gpu-ctr-01")
    import_plan(
        "a_device,a_port,b_device,b_port\n" + "".join(f"gpu-ctr-01 mlx5_{k},1,leaf-r{k},1\n" for k in range(8)),
        actor=Actor.system("tests"),
    )
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        report(node, 0, start)
        assert record_agent_counters().endswith("8 ports")
    later = start + timezone.timedelta(minutes=15)
    with time_machine.travel(later, tick=False):
        report(node, 900, later)
        record_agent_counters()
    assert DiscoveryRun.objects.filter(source=RunSource.AGENTS).count() == 2
    snapshot = PortCounterSnapshot.objects.filter(device__name="gpu-ctr-01 mlx5_2").first()
    assert snapshot.deltas["symbol_error"] == 900
    ticket = Ticket.objects.get(kind=DiscrepancyKind.COUNTER_ERRORS)
    assert ticket.endpoints == ["gpu-ctr-01 mlx5_2/1"] and list(ticket.nodes.all()) == [node]


def test_without_a_plan_or_a_collector_the_tasks_do_nothing(settings):
    settings.NODEWARDEN_FABRIC_COLLECT = False
    assert collect_fabric() == "disabled (NODEWARDEN_FABRIC_COLLECT)"
    assert record_agent_counters() == "no planned HCA on a known node"
    assert not DiscoveryRun.objects.exists()
