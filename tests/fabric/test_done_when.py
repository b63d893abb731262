"""Issue 5's done-when, against a real simulated fabric (ibsim + opensm + infiniband-diags):
a pulled cable, a swapped pair, a degraded link and rising error counters each show up as
the right discrepancy on the right ports, open one ticket each, reach the affected nodes'
histories, and clear when fixed. The faults are injected through ibsim's console (pull,
swap, counters) or built into the fabric (a cable trained at 1X: ibsim cannot retrain a
live cable, so "fixed" is the fabric rebuilt as planned)."""

from __future__ import annotations

import pytest

from fabric.choices import DiscrepancyKind as K
from fabric.choices import TicketStatus
from fabric.discovery import seen_from_topology
from fabric.models import Ticket
from fabric.plan import import_plan
from fabric.services import record_run
from fabric.topology import generate_fat_tree
from health.models import Alert, Finding
from nodes.services import Actor
from sandbox.emulators.fabric import SimulatedFabric
from tests.factories import NodeFactory

from .conftest import SMALL, require_ibsim

pytestmark = pytest.mark.django_db


def look(sim: SimulatedFabric):
    outputs = sim.collect()
    topology, counters = outputs.parse()
    seen, by_port, guids = seen_from_topology(topology, counters)
    return record_run(seen, by_port or {}, outputs=outputs.texts(), guids=guids)


def open_tickets() -> dict[str, Ticket]:
    return {t.kind: t for t in Ticket.objects.filter(status=TicketStatus.OPEN)}


def test_faults_on_a_simulated_fabric_become_one_ticket_each_and_clear_when_fixed():
    require_ibsim()
    plan = generate_fat_tree(**SMALL)
    nodes = {host: NodeFactory(hostname=host) for host in plan.hosts()}
    import_plan(plan.plan_csv(), actor=Actor.system("tests"), source="generated")
    built = generate_fat_tree(**SMALL)
    (degraded,) = built.plant(degraded=1, seed=5)  # the first pick trains at 1X
    assert degraded.width == "1X"

    with SimulatedFabric(built, sweep_interval=1) as sim:
        first = look(sim)
        assert first.summary["by_kind"] == {K.DEGRADED: 1}
        sim.unlink("gpu-node-0003 mlx5_1")
        sim.swap_cables(("gpu-node-0002 mlx5_0", 1), ("gpu-node-0002 mlx5_1", 1))
        sim.set_counter("leaf-r0-01", 4, "SymbolErrorCounter", 1234)
        second = look(sim)

        tickets = open_tickets()
        assert sorted(tickets) == sorted([K.DEGRADED, K.LINK_DOWN, K.SWAPPED, K.COUNTER_ERRORS])
        assert Ticket.objects.count() == 4, "one ticket per problem"
        row = degraded.planned[0]
        assert tickets[K.DEGRADED].endpoints == sorted([str(row.a), str(row.b)])
        assert tickets[K.DEGRADED].times_seen == 2
        assert tickets[K.LINK_DOWN].endpoints == ["gpu-node-0003 mlx5_1/1", "leaf-r1-01/3"]
        assert tickets[K.SWAPPED].endpoints == [
            "gpu-node-0002 mlx5_0/1",
            "gpu-node-0002 mlx5_1/1",
            "leaf-r0-01/2",
            "leaf-r1-01/2",
        ]
        assert tickets[K.COUNTER_ERRORS].endpoints == ["leaf-r0-01/4"]
        assert "symbol_error" in tickets[K.COUNTER_ERRORS].detail
        assert second.summary["tickets_opened"] == 3

        # The affected nodes' histories: a finding each, naming the ticket and the ports.
        down = Finding.objects.get(node=nodes["gpu-node-0003"], rule="ib_fabric")
        assert f"#{tickets[K.LINK_DOWN].pk}" in down.summary and "leaf-r1-01/3" in down.summary
        assert Finding.objects.filter(node=nodes["gpu-node-0002"], rule="ib_fabric").count() == 1
        assert list(tickets[K.COUNTER_ERRORS].nodes.all()) == [nodes["gpu-node-0004"]]  # leaf-r0-01/4's host

        # Fixed: cable back, swap undone; the counter stays where it was (no longer rising).
        sim.relink("gpu-node-0003 mlx5_1")
        sim.swap_cables(("gpu-node-0002 mlx5_0", 1), ("gpu-node-0002 mlx5_1", 1))
        third = look(sim)
        assert sorted(open_tickets()) == [K.DEGRADED]
        assert third.summary["tickets_closed"] == 3

    with SimulatedFabric(plan, sweep_interval=1) as rebuilt:  # the 1X cable replaced: built as planned
        fourth = look(rebuilt)
    assert fourth.summary["discrepancies"] == 0 and not open_tickets()
    assert not Alert.objects.filter(rule="ib_fabric", state="firing").exists()
    assert Alert.objects.filter(rule="ib_fabric", state="resolved").count() >= 3
