"""The simulated scheduler adapter answers Nodewarden's calls from the running simulation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from sandbox.simulator import scheduler as simulated
from sandbox.simulator.workload import RUNNING, SyncJob
from schedulers.base import OWNER, SchedulerConflict, SchedulerError, adapter_for
from tests.factories import ClusterFactory, NodeFactory

T0 = datetime(2026, 1, 5, tzinfo=UTC)


class World:
    def __init__(self, hosts: set[str]) -> None:
        self.cordons: dict[str, str] = {}
        self.job = SyncJob(size=len(hosts), checkpoint_interval=timedelta(minutes=20), restart_cost=timedelta(0))
        self.job.advance(T0, hosts)
        self.evicted: list[str] = []

    def job_runs_on(self, host: str) -> bool:
        return self.job.state == RUNNING and host in self.job.members

    def evict(self, host: str, reason: str) -> None:
        from django.utils import timezone

        self.evicted.append(host)
        self.job.interrupt(timezone.now(), host, "evicted")


@pytest.fixture
def world_and_node(db):
    cluster = ClusterFactory(scheduler_kind="simulated")
    node = NodeFactory(hostname="sim-00001.example", cluster=cluster)
    world = World({"sim-00001", "sim-00002"})
    simulated.attach(cluster.pk, world)
    yield world, node
    simulated.detach(cluster.pk)


def test_drain_waits_for_the_job_and_uncordon_lifts_only_ours(world_and_node):
    world, node = world_and_node
    adapter = adapter_for(node.cluster)
    assert adapter.kind == "simulated" and adapter.is_running_work(node)
    adapter.drain(node, reason="test")
    state = adapter.drain_state(node)
    assert state.cordoned and not state.drained and state.running_jobs == 1 and state.owner == OWNER
    with time_machine.travel(T0 + timedelta(minutes=30)):
        adapter.evict(node, reason="catastrophic")
    assert world.evicted == ["sim-00001"] and len(world.job.interruptions) == 1
    assert adapter.drain_state(node).drained
    adapter.uncordon(node, reason="back")
    assert "sim-00001" not in world.cordons
    world.cordons["sim-00001"] = "operator"
    with pytest.raises(SchedulerConflict, match="operator"):
        adapter.uncordon(node, reason="back")


def test_no_running_simulation_is_a_scheduler_error(db):
    node = NodeFactory(cluster=ClusterFactory(scheduler_kind="simulated"))
    with pytest.raises(SchedulerError, match="No fleet simulation"):
        adapter_for(node.cluster).is_running_work(node)
