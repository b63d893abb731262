"""One interface to the workload schedulers that run customer jobs on a cluster's nodes.

An adapter per scheduler kind (``Cluster.scheduler_kind``), picked by ``adapter_for``:
- ``is_running_work``: does customer work run on the node now?
- ``cordon`` / ``uncordon``: no new work (existing work carries on) / take work again;
- ``drain``: no new work, and the node leaves when its current work ends;
- ``evict``: move work off now (the node is failing anyway);
- ``drain_state``: where a drain stands (drained yet? how many jobs left? who owns it?).

Nodewarden respects others' decisions: a cordon or drain it did not set is never lifted by
it (``SchedulerConflict``), and every cordon it sets records it as the owner.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

OWNER = "nodewarden"


class SchedulerError(Exception):
    """The scheduler could not be asked or refused (message: what, where, its answer)."""


class SchedulerConflict(SchedulerError):
    """Someone else owns the node's cordon or drain: Nodewarden leaves it alone."""


@dataclass(frozen=True)
class DrainState:
    cordoned: bool  # no new work may start
    drained: bool  # cordoned and no customer work left
    running_jobs: int
    owner: str | None  # who set the cordon/drain: OWNER, another name, or None
    detail: str = ""  # the scheduler's own words (e.g. Slurm "MIXED+DRAIN", reason)


class SchedulerAdapter(ABC):
    """One cluster's scheduler. Every method may raise SchedulerError; all are idempotent."""

    kind = ""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def node_name(self, node: Any) -> str:
        """The node's name in the scheduler: the short host name."""
        return str(node.hostname).split(".", 1)[0]

    @abstractmethod
    def is_running_work(self, node: Any) -> bool: ...

    @abstractmethod
    def cordon(self, node: Any, *, reason: str) -> None: ...

    @abstractmethod
    def uncordon(self, node: Any, *, reason: str) -> None: ...

    @abstractmethod
    def drain(self, node: Any, *, reason: str) -> None: ...

    @abstractmethod
    def evict(self, node: Any, *, reason: str) -> None: ...

    @abstractmethod
    def drain_state(self, node: Any) -> DrainState: ...


class NoScheduler(SchedulerAdapter):
    """A cluster without a workload scheduler: nothing can run there that we do not know of."""

    kind = "none"

    def is_running_work(self, node: Any) -> bool:
        return False

    def cordon(self, node: Any, *, reason: str) -> None:
        return None

    def uncordon(self, node: Any, *, reason: str) -> None:
        return None

    def drain(self, node: Any, *, reason: str) -> None:
        return None

    def evict(self, node: Any, *, reason: str) -> None:
        return None

    def drain_state(self, node: Any) -> DrainState:
        return DrainState(cordoned=True, drained=True, running_jobs=0, owner=OWNER, detail="no workload scheduler")


def adapter_for(cluster: Any) -> SchedulerAdapter:
    """The adapter for the cluster's scheduler kind (NoScheduler for none or no cluster)."""
    kind = getattr(cluster, "scheduler_kind", "none") if cluster is not None else "none"
    if kind == "slurm":
        from .slurm import SlurmAdapter

        return SlurmAdapter(cluster)
    if kind == "kubernetes":
        from .kubernetes import KubernetesAdapter

        return KubernetesAdapter(cluster)
    if kind == "simulated":
        from .simulated import SimulatedScheduler

        return SimulatedScheduler(cluster)
    return NoScheduler(cluster)
