"""The fleet simulator's scheduler (``Cluster.scheduler_kind`` "simulated").

Answers the adapter calls from the simulation running in this process (``simulator.engine``
registers it per cluster with ``attach``): its synchronous job is the customer work, and its
cordons are kept in memory the way Slurm keeps DRAIN flags. Evicting a member of the running
job interrupts the job, as requeueing one node of a synchronous job does.

Fenced GPUs (``fence_gpus``, as Slurm would take them out of the node's gres) are kept per host:
the node stays in the job, which runs on its other GPUs (its processes are sized to the usable
GPUs), and a defect on a fenced GPU no longer crashes the job; the lost capacity is counted as
fenced GPU-hours in the report. Fencing never fails here.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.utils import timezone

from schedulers.base import CHECK_HOLD, OWNER, DrainState, SchedulerAdapter, SchedulerConflict, SchedulerError


class World(Protocol):
    """What the adapter needs from a running simulation."""

    cordons: dict[str, str]  # host -> owner of its cordon or drain

    def job_runs_on(self, host: str) -> bool: ...

    def evict(self, host: str, reason: str) -> None: ...

    def fence(self, host: str, indices: list[int]) -> bool: ...

    def unfence(self, host: str, indices: list[int]) -> bool: ...


_WORLDS: dict[int, World] = {}
# The owner recorded for an active check's hold: ours, and told apart from a lifecycle cordon.
CHECK_OWNER = f"{OWNER}: {CHECK_HOLD}"


def attach(cluster_id: int, world: World) -> None:
    _WORLDS[cluster_id] = world


def detach(cluster_id: int) -> None:
    _WORLDS.pop(cluster_id, None)


class SimulatedScheduler(SchedulerAdapter):
    kind = "simulated"

    @property
    def world(self) -> World:
        cluster_id: int | None = getattr(self.cluster, "pk", None)
        world = _WORLDS.get(cluster_id) if cluster_id is not None else None
        if world is None:
            raise SchedulerError(f"No fleet simulation is running for cluster {self.cluster} in this process.")
        return world

    def is_running_work(self, node: Any) -> bool:
        return self.world.job_runs_on(self.node_name(node))

    def cordon(self, node: Any, *, reason: str) -> None:
        host = self.node_name(node)
        if self.world.cordons.get(host) in (None, CHECK_OWNER):  # a check's hold is taken over
            self.world.cordons[host] = OWNER

    drain = cordon  # the job keeps the node until it ends (or crashes); a cordoned node is never picked again

    def uncordon(self, node: Any, *, reason: str) -> None:
        host = self.node_name(node)
        owner = self.world.cordons.get(host)
        if owner not in (None, OWNER, CHECK_OWNER):
            raise SchedulerConflict(f"{host} is cordoned by {owner}, not by Nodewarden: left as it is.")
        self.world.cordons.pop(host, None)

    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        owner = self.world.cordons.setdefault(self.node_name(node), CHECK_OWNER)
        return owner == CHECK_OWNER

    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        host = self.node_name(node)
        owner = self.world.cordons.get(host)
        if owner is None:
            return True
        if owner != CHECK_OWNER:
            return False
        del self.world.cordons[host]
        return True

    def evict(self, node: Any, *, reason: str) -> None:
        """Cordon, then take the node from the job (as Slurm's adapter drains, then requeues)."""
        self.cordon(node, reason=reason)
        self.world.evict(self.node_name(node), reason)

    def fence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """The scheduler hands these GPUs of the node out no more; the node keeps running its work."""
        return self.world.fence(self.node_name(node), list(indices))

    def unfence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        return self.world.unfence(self.node_name(node), list(indices))

    def drain_state(self, node: Any) -> DrainState:
        host = self.node_name(node)
        owner = self.world.cordons.get(host)
        running = self.world.job_runs_on(host)
        return DrainState(
            cordoned=owner is not None,
            drained=owner is not None and not running,
            running_jobs=int(running),
            owner=owner,
            detail=f"simulated at {timezone.now():%Y-%m-%d %H:%M}",
        )
