"""One interface to the workload schedulers that run customer jobs on a cluster's nodes.

An adapter per scheduler kind (``Cluster.scheduler_kind``), picked by ``adapter_for`` from the kinds
installed apps registered (``fleet/schedulerkinds.py``; Slurm and Kubernetes in ``schedulers/apps.py``):
- ``is_running_work``: does customer work run on the node now?
- ``cordon`` / ``uncordon``: no new work (existing work carries on) / take work again;
- ``drain``: no new work, and the node leaves when its current work ends;
- ``evict``: move work off now (the node is failing anyway);
- ``drain_state``: where a drain stands (drained yet? how many jobs left? who owns it?);
- ``work_summary``: what customer work holds the node ("" when none), for the idleness answer;
- ``wants_node``: would the scheduler start waiting work on the node now (why, or None)? Asked
  about nodes held for an active check, which then gives way (``checks.services.preempt_check``);
- ``fence_gpus`` / ``unfence_gpus``: the scheduler stops (starts again) handing out some GPUs of a
  node by index, the rest of the node serving on; False where it cannot do that safely, and the
  caller drains the node instead (``nodes.services.fence_gpu`` via ``schedulers.reactions``);
- ``apply_many``: one reaction (evict, drain, cordon, resume) for many nodes of the cluster at once,
  each node with its own reason and its own outcome; adapters batch it (Slurm: host lists and one
  ``scontrol`` per batch), the default asks node by node;
- ``hold_for_check`` / ``release_check_hold``: keep new work off while an active check runs on a
  node in production, then give the node back. The hold is Nodewarden's cordon with a reason that
  starts with ``CHECK_HOLD`` ("active check"), so anyone (an admin, the fleet auditor, the lifecycle)
  can tell it from a lifecycle cordon. A lifecycle cordon or drain set meanwhile replaces the
  reason, and so takes the cordon over: the check's release then leaves it in place.

Nodewarden respects others' decisions: a cordon or drain it did not set is never lifted by
it (``SchedulerConflict``), and every cordon it sets records it as the owner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OWNER = "nodewarden"
# How a check's hold starts its reason (Slurm: "nodewarden: active check ..."; Kubernetes: the
# cordon-reason annotation): a cordon with any other reason is not the check's to lift.
CHECK_HOLD = "active check"


def check_hold_reason(reason: str) -> str:
    """The reason, one line, starting with CHECK_HOLD (added when it does not already)."""
    reason = " ".join(reason.split())
    return reason if reason.startswith(CHECK_HOLD) else f"{CHECK_HOLD}: {reason}".rstrip(": ")


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

    def apply_many(self, reaction: str, items: Sequence[tuple[Any, str]]) -> dict[int, SchedulerError | None]:
        """Carry out ``reaction`` ("evict", "drain", "cordon" or "resume": ``schedulers.reactions``) for
        each (node, reason); per node pk, None (done) or the SchedulerError it met. One node's failure
        never stops the others. This default asks node by node; adapters that can, batch."""
        verb = {"evict": self.evict, "drain": self.drain, "cordon": self.cordon, "resume": self.uncordon}[reaction]
        outcome: dict[int, SchedulerError | None] = {}
        for node, reason in items:
            try:
                verb(node, reason=reason)
                outcome[node.pk] = None
            except SchedulerError as exc:
                outcome[node.pk] = exc
        return outcome

    def work_summary(self, node: Any) -> str:
        """What customer work holds the node, in the scheduler's words; "" when none."""
        return "customer work is running" if self.is_running_work(node) else ""

    def wants_node(self, node: Any) -> str | None:
        """Why the scheduler wants the node for waiting work now (a pending job that could run
        there), in its own words; None when nothing waits for it (or the scheduler cannot tell)."""
        return None

    @abstractmethod
    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        """Keep new work off the node while an active check runs (current work is not touched).

        True: the check's own hold is in place (set now, or already there) and is the check's to
        give back. False: a cordon that is not the check's (an admin's, the lifecycle's) already
        keeps work off; it is left as it is and there is nothing of the check's to give back.
        """

    @abstractmethod
    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        """Give the node back after a check: lift the cordon only while it is still the check's.

        True: lifted, or no cordon at all. False: the cordon there now is not the check's (a
        lifecycle cordon or someone else's took it over) and stays.
        """

    def fence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Stop handing out these GPUs of the node (by index); the rest of the node serves on.

        True: the scheduler no longer hands them out (now, or already). False: it cannot do that
        safely here (no GPU resource known to it, work holding GPUs, a scheduler that cannot say
        which GPU), and the caller must drain the node instead. A scheduler without the notion
        answers False: this default.
        """
        return False

    def unfence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Hand these GPUs out again. True: done, or nothing of ours fenced them; False: it cannot."""
        return False

    # Whether the scheduler shows the node's health beyond the cordon (``schedulers.conditions``).
    reports_health = False

    def report_health(self, node: Any, report: Any) -> None:
        """Show ``report`` (a ``conditions.HealthReport``) on the node: a condition, labels, an Event.
        This default has nowhere to show it (Slurm's reason is the cordon's own reason)."""
        return


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

    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        return False  # no scheduler starts work here: nothing to hold, nothing to give back

    def fence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        return True  # nothing hands GPUs out here but what Nodewarden's own record says

    def unfence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        return True

    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        return True


class UnregisteredScheduler(SchedulerAdapter):
    """A cluster naming a kind no installed app registered (e.g. the sandbox's simulated one in a
    product-only install). Every question fails: claiming "no work runs" for a scheduler we cannot
    ask would let a drain finish on a busy node."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self.kind = str(getattr(cluster, "scheduler_kind", ""))

    def _refuse(self) -> SchedulerError:
        return SchedulerError(
            f"Cluster {self.cluster} names scheduler kind {self.kind!r}, which no installed app provides."
        )

    def is_running_work(self, node: Any) -> bool:
        raise self._refuse()

    def cordon(self, node: Any, *, reason: str) -> None:
        raise self._refuse()

    def uncordon(self, node: Any, *, reason: str) -> None:
        raise self._refuse()

    def drain(self, node: Any, *, reason: str) -> None:
        raise self._refuse()

    def evict(self, node: Any, *, reason: str) -> None:
        raise self._refuse()

    def drain_state(self, node: Any) -> DrainState:
        raise self._refuse()

    def wants_node(self, node: Any) -> str | None:
        raise self._refuse()

    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        raise self._refuse()

    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        raise self._refuse()


def adapter_for(cluster: Any) -> SchedulerAdapter:
    """The adapter for the cluster's scheduler kind, from the registry (fleet/schedulerkinds.py).

    NoScheduler for "none" or no cluster; UnregisteredScheduler for a kind nothing installed brings.
    """
    from fleet.schedulerkinds import scheduler_kind

    kind = getattr(cluster, "scheduler_kind", "none") if cluster is not None else "none"
    entry = scheduler_kind(kind)
    if entry is None:
        return UnregisteredScheduler(cluster)
    if entry.adapter is None:
        return NoScheduler(cluster)
    adapter: SchedulerAdapter = entry.adapter(cluster)
    return adapter
