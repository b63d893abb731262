"""Runs against the plan in force: discrepancies, tickets opened once and closed when fixed,
and the affected nodes' histories (findings and their resolution)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fabric import services
from fabric.choices import DiscrepancyKind as K
from fabric.choices import TicketStatus
from fabric.models import CablingPlan, Discrepancy, FabricDevice, LinkFlap, PlannedLink, Ticket
from fabric.plan import PlanImportError, import_plan
from fabric.validation import Port, Seen, SeenLink
from health.models import Alert, Finding
from nodes.models import NodeEvent
from nodes.services import Actor
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
TESTS = Actor.system("tests")

PLAN_CSV = """a_device,a_port,b_device,b_port,width,rate_gbps
gpu-01 mlx5_0,1,leaf01,1,4X,400
gpu-02 mlx5_0,1,leaf01,2,4X,400
leaf01,7,spine01,1,4X,400
"""


def P(text: str) -> Port:  # noqa: N802 - reads like the Port it builds: P('leaf01/3')
    device, port = text.rsplit("/", 1)
    return Port(device, int(port))


def as_planned() -> Seen:
    links = [
        SeenLink(P("gpu-01 mlx5_0/1"), P("leaf01/1"), "4X", 400.0),
        SeenLink(P("gpu-02 mlx5_0/1"), P("leaf01/2"), "4X", 400.0),
        SeenLink(P("leaf01/7"), P("spine01/1"), "4X", 400.0),
    ]
    return Seen(links=links, devices={"gpu-01 mlx5_0", "gpu-02 mlx5_0", "leaf01", "spine01"})


@pytest.fixture
def nodes(db):
    return {name: NodeFactory(hostname=name) for name in ("gpu-01", "gpu-02")}


@pytest.fixture
def plan(nodes):
    return import_plan(PLAN_CSV, actor=TESTS, source="plan.csv")


def test_a_good_plan_is_stored_with_roles_and_nodes(plan, nodes):
    assert plan.links == 3 and PlannedLink.objects.filter(plan=plan).count() == 3
    roles = dict(FabricDevice.objects.values_list("name", "role"))
    assert roles == {"gpu-01 mlx5_0": "host", "gpu-02 mlx5_0": "host", "leaf01": "leaf", "spine01": "spine"}
    assert FabricDevice.objects.get(name="gpu-02 mlx5_0").node == nodes["gpu-02"]


def test_a_bad_plan_names_every_bad_line_and_stores_nothing(db):
    bad = (
        "a_device,a_port,b_device,b_port,width\n"
        "gpu-01 mlx5_0,1,leaf01,1,4X\n"
        "gpu-02 mlx5_0,x,leaf01,2,4X\n"  # line 3: port
        "gpu-03 mlx5_0,1,leaf01,1,4X\n"  # line 4: leaf01/1 twice
        "gpu-04 mlx5_0,1,,3,5X\n"
    )  # line 5: empty device, bad width
    with pytest.raises(PlanImportError) as refused:
        import_plan(bad, actor=TESTS)
    lines = [line for line, _ in refused.value.errors]
    assert lines == [3, 4, 5, 5]
    assert "leaf01/1 is already cabled on line 2" in str(refused.value)
    assert not CablingPlan.objects.exists() and not FabricDevice.objects.exists()
    with pytest.raises(PlanImportError, match="missing column"):
        import_plan("a,b\n1,2\n", actor=TESTS)


def test_a_fabric_as_planned_opens_nothing(plan):
    run = services.record_run(as_planned(), {}, actor=TESTS)
    assert run.summary["discrepancies"] == 0 and not Ticket.objects.exists()


def test_a_pulled_cable_opens_one_ticket_reaches_the_node_and_closes_when_fixed(plan, nodes):
    pulled = as_planned()
    pulled.links.pop(1)
    pulled.down_ports[P("leaf01/2")] = "Down/Polling"
    pulled.devices.discard("gpu-02 mlx5_0")
    first = services.record_run(pulled, {}, actor=TESTS)
    services.record_run(pulled, {}, actor=TESTS)  # seen again: the same ticket
    (ticket,) = Ticket.objects.all()
    assert ticket.kind == K.LINK_DOWN and ticket.times_seen == 2 and ticket.first_run == first
    assert ticket.endpoints == ["gpu-02 mlx5_0/1", "leaf01/2"] and list(ticket.nodes.all()) == [nodes["gpu-02"]]
    assert Discrepancy.objects.filter(kind=K.LINK_DOWN).count() == 2
    finding = Finding.objects.get(node=nodes["gpu-02"], rule=services.FINDING_RULE)
    assert "leaf01/2 Down/Polling" in finding.summary and finding.severity == "degraded"
    assert services.node_fabric_problems(nodes["gpu-02"].pk) == [ticket]

    fixed = services.record_run(as_planned(), {}, actor=TESTS)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED and ticket.closed_reason == f"Fixed: not found by run {fixed.pk}"
    assert Alert.objects.get(node=nodes["gpu-02"], rule=services.FINDING_RULE).state == "resolved"
    assert NodeEvent.objects.filter(node=nodes["gpu-02"], reason__contains="fabric ticket").exists()
    assert services.node_fabric_problems(nodes["gpu-02"].pk) == []


def test_rising_counters_open_a_ticket_that_closes_once_they_stop(plan):
    port = P("leaf01/2")
    now = timezone.now()
    services.record_run(as_planned(), {port: {"symbol_error": 0}}, actor=TESTS, now=now)
    services.record_run(as_planned(), {port: {"symbol_error": 1234}}, actor=TESTS, now=now + timedelta(minutes=30))
    ticket = Ticket.objects.get(kind=K.COUNTER_ERRORS)
    assert ticket.endpoints == ["leaf01/2"] and "symbol_error +1234 in 0.5 h" in ticket.detail
    services.record_run(as_planned(), {port: {"symbol_error": 1236}}, actor=TESTS, now=now + timedelta(hours=3))
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED


def test_a_counter_reset_is_not_taken_for_errors(plan):
    port = P("leaf01/2")
    now = timezone.now()
    services.record_run(None, {port: {"symbol_error": 90}}, actor=TESTS, now=now)
    run = services.record_run(None, {port: {"symbol_error": 3}}, actor=TESTS, now=now + timedelta(hours=1))
    assert run.summary["discrepancies"] == 0
    assert run.counter_snapshots.get().deltas == {"symbol_error": 3}


def test_three_flaps_in_the_window_are_a_flapping_link(plan):
    port = P("leaf01/7")
    now = timezone.now()
    for i, downed in enumerate((0, 1, 2, 4)):
        services.record_run(as_planned(), {port: {"link_downed": downed}}, actor=TESTS, now=now + timedelta(hours=i))
    assert LinkFlap.objects.filter(port=7).count() == 3
    ticket = Ticket.objects.get(kind=K.FLAPPING)
    assert ticket.endpoints == ["leaf01/7"] and "4 link-down events in 12 h" in ticket.detail


def test_a_counters_only_run_does_not_close_topology_tickets(plan):
    pulled = as_planned()
    pulled.links.pop(0)
    services.record_run(pulled, {}, actor=TESTS)
    services.record_run(None, {P("leaf01/7"): {"symbol_error": 0}}, actor=TESTS)
    assert Ticket.objects.get().status == TicketStatus.OPEN
