"""The Day 1 fabric and cable check where the cabling plan lists the node's HCAs: it waits for
a discovery run made after it began, and fails on an open fabric ticket on the node's ports."""

from __future__ import annotations

import pytest

from fabric.plan import import_plan
from fabric.services import record_run
from fabric.validation import Port, Seen, SeenLink
from nodes import services as node_services
from nodes.choices import NodeState, RunKind, RunStatus
from nodes.models import NodeEvent
from nodes.services import Actor
from validation import services

from .conftest import idle_report, send

pytestmark = pytest.mark.django_db
TESTS = Actor.system("tests")


def plan_for(hostname: str) -> list[tuple[Port, Port]]:
    cables = [(Port(f"{hostname} mlx5_{k}", 1), Port(f"leaf-r{k}", 1)) for k in range(8)]
    csv = "a_device,a_port,b_device,b_port,width,rate_gbps\n" + "".join(
        f"{a.device},{a.port},{b.device},{b.port},4X,400\n" for a, b in cables
    )
    import_plan(csv, actor=TESTS)
    return cables


def seen(cables, *, pull: int | None = None) -> Seen:
    links = [SeenLink(a, b, "4X", 400.0) for i, (a, b) in enumerate(cables) if i != pull]
    down = {cables[pull][1]: "Down/Polling"} if pull is not None else {}
    return Seen(links=links, down_ports=down, devices={p.device for c in cables for p in c})


@pytest.fixture
def at_fabric_check(node_in, eager):
    node = node_in(NodeState.BURN_IN)
    cables = plan_for(node.hostname)
    send(node, idle_report(node))
    with eager():
        node_services.pass_burn_in(node.pk, actor=TESTS, reason="burn-in passed")
    node.refresh_from_db()
    return node, cables


def fabric_run(node):
    return node.runs.get(kind=RunKind.STAGE_FABRIC)


def test_it_waits_for_a_discovery_run_then_passes_when_cabled_as_planned(at_fabric_check, eager):
    node, cables = at_fabric_check
    assert fabric_run(node).status == RunStatus.RUNNING  # the agent's view is fine; no run since it began
    run = record_run(seen(cables), {}, actor=TESTS)
    with eager():
        services.advance_open_stages()
    node.refresh_from_db()
    assert node.state == NodeState.RELIABILITY_ASSESSMENT
    assert f"Cabled as planned (discovery run {run.pk})" in fabric_run(node).summary


def test_a_pulled_cable_on_the_node_fails_the_check_naming_the_ticket_and_ports(at_fabric_check, eager):
    node, cables = at_fabric_check
    record_run(seen(cables, pull=5), {}, actor=TESTS)
    with eager():
        services.advance_open_stages()
    node.refresh_from_db()
    assert node.state == NodeState.TRIAGE
    reason = NodeEvent.objects.filter(node=node, transition="fail_validation").get().reason
    assert f"Link down: {node.hostname} mlx5_5/1 <-> leaf-r5/1" in reason and "leaf-r5/1 Down/Polling" in reason


def test_a_ticket_opened_before_the_node_enrolled_still_fails_its_fabric_check(node_in, eager):
    cables = [(Port(f"gpu-late-01 mlx5_{k}", 1), Port(f"leaf-r{k}", 1)) for k in range(8)]
    import_plan(
        "a_device,a_port,b_device,b_port,width,rate_gbps\n"
        + "".join(f"{a.device},{a.port},{b.device},{b.port},4X,400\n" for a, b in cables),
        actor=TESTS,
    )
    record_run(seen(cables, pull=2), {}, actor=TESTS)  # the bay's fabric is checked before the server enrolls
    node = node_in(NodeState.BURN_IN, hostname="gpu-late-01")
    send(node, idle_report(node))
    with eager():
        node_services.pass_burn_in(node.pk, actor=TESTS, reason="burn-in passed")
    record_run(seen(cables, pull=2), {}, actor=TESTS)
    with eager():
        services.advance_open_stages()
    node.refresh_from_db()
    assert node.state == NodeState.TRIAGE
    assert "gpu-late-01 mlx5_2/1 <-> leaf-r2/1" in NodeEvent.objects.get(node=node, transition="fail_validation").reason
