"""The simulated cluster's work: one synchronous training job spanning most of the fleet.

The job runs on ``size`` nodes at once. Any of them failing crashes it (that is what makes a
synchronous job fragile: one node's fault interrupts thousands of GPUs). It then rolls back to
its last checkpoint, waits ``restart_cost`` and starts again on ``size`` nodes the scheduler may
use: up, and neither cordoned nor drained by anyone. Without enough of them it waits.

Effective training time ratio (ETTR) = work kept / wall time. Work is kept at each checkpoint
(every ``checkpoint_interval`` of running; non-blocking, as the ETTR model of Kokolis et al.
assumes); an interruption loses the work since the last checkpoint and costs the restart.

Plain Python, no database: ``sandbox.simulator.scheduler`` answers Nodewarden's scheduler calls from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

RUNNING, RESTARTING, WAITING = "running", "restarting", "waiting"


@dataclass
class Interruption:
    at: datetime
    cause: str  # fault class key, or "evicted" when Nodewarden took a job node away
    host: str
    lost: timedelta  # work since the last checkpoint


@dataclass
class SyncJob:
    size: int
    checkpoint_interval: timedelta
    restart_cost: timedelta
    state: str = WAITING
    members: set[str] = field(default_factory=set)
    since: datetime | None = None  # when the current state began
    last_checkpoint: datetime | None = None
    kept: timedelta = timedelta(0)
    interruptions: list[Interruption] = field(default_factory=list)
    waited: timedelta = timedelta(0)  # time without enough usable nodes
    restarting: timedelta = timedelta(0)

    def _checkpoints_until(self, now: datetime) -> None:
        if self.state != RUNNING or self.last_checkpoint is None:
            return
        done = (now - self.last_checkpoint) // self.checkpoint_interval
        if done:
            self.kept += self.checkpoint_interval * done
            self.last_checkpoint += self.checkpoint_interval * done

    def advance(self, now: datetime, usable: set[str]) -> None:
        """Bring the job's clock to ``now``: checkpoints, a finished restart, a start once nodes are there."""
        if self.since is None:
            self.since = now  # submitted: waiting for nodes from now on
        self._checkpoints_until(now)
        if self.state == RESTARTING and self.since is not None and now >= self.since + self.restart_cost:
            self.restarting += self.restart_cost
            self._set(WAITING, self.since + self.restart_cost)
        if self.state == WAITING and len(usable) >= self.size:
            self.waited += now - self.since
            self.members = set(sorted(usable)[: self.size])
            self._set(RUNNING, now)
            self.last_checkpoint = now

    def _set(self, state: str, at: datetime) -> None:
        self.state, self.since = state, at

    def interrupt(self, now: datetime, host: str, cause: str) -> Interruption | None:
        """A member failed (or was taken away): roll back to the checkpoint and restart."""
        if self.state != RUNNING or host not in self.members:
            return None
        self._checkpoints_until(now)
        lost = now - (self.last_checkpoint or now)
        hit = Interruption(now, cause, host, lost)
        self.interruptions.append(hit)
        self.members = set()
        self._set(RESTARTING, now)
        return hit

    def finish(self, now: datetime) -> None:
        """End of the simulation: the work since the last checkpoint counts (it would be saved next)."""
        self._checkpoints_until(now)
        if self.state == RUNNING and self.last_checkpoint is not None:
            self.kept += now - self.last_checkpoint
            self.last_checkpoint = now
        elif self.state == WAITING and self.since is not None:
            self.waited += now - self.since
            self.since = now
        elif self.state == RESTARTING and self.since is not None:
            self.restarting += min(now - self.since, self.restart_cost)

    def ettr(self, duration: timedelta) -> float:
        return self.kept / duration if duration else 0.0
