"""Slurm: cordon, drain and evict nodes with ``scontrol``, read them with ``scontrol``/``squeue``.

Written against Slurm 22.05 (Debian 12), tested against a real cluster (sandbox/emulators/slurm.py).
Every command runs as a subprocess with a timeout; a failure becomes ``SchedulerError`` naming the
command, its exit status and its stderr. Which cluster: ``Cluster.scheduler_endpoint`` when it is a
path to a slurm.conf (starts with "/"), else whatever SLURM_CONF/the default config says.

Slurm's words for our verbs:

- drain: ``scontrol update nodename=N state=drain reason="nodewarden: <reason>"``. Running jobs
  carry on, no new job starts (MIXED+DRAIN, "draining"), and the node is IDLE+DRAIN ("drained")
  once they end.
- cordon: the same command. Slurm has no "no new work" without the drain flag, and a drained node
  simply stays drained, so a cordoned node and a draining one look alike.
- evict: drain, then ``scontrol requeue <job>`` for each job on the node; a job that cannot be
  requeued (``--no-requeue``, JobRequeue=0) is ``scancel``-ed, and the drain reason says so.
- uncordon: ``scontrol update nodename=N state=resume``, only when the drain reason is ours
  ("nodewarden: ..."). Another's drain raises SchedulerConflict; a node that is not drained is left
  alone (Slurm itself refuses to resume it: "Invalid node state specified").

Another's drain is never taken over either: draining a node an admin already drained keeps the
admin's reason (and so the admin's ownership), since the node takes no new work anyway. Our own
drain's reason is rewritten when a later reaction gives another (the node's state comes first in
it: ``schedulers.reactions``), so ``sinfo -R`` says what Nodewarden says of the node.

An active check's hold is a drain too, with the reason "nodewarden: active check ..." (a drain,
not a reservation: it is the one mark Slurm's admins, ``sinfo -R`` and our own ownership rule
already read; a reservation would need its own name, account ACL and IGNORE_JOBS semantics,
and would not show in the node's state). A lifecycle drain or cordon on a held node replaces the
reason, so the check's release (``release_check_hold``) then finds the drain no longer its own
and leaves it.

Fencing one GPU (``fence_gpus``): ``scontrol update nodename=N gres=gpu:<count less the fenced>``,
the fenced indices recorded in the node's Comment ("nodewarden-gpu-fence: 2 of 8", kept beside
any comment of the admins'). It answers False (and the caller drains the node) when the node has
no single gpu GRES, when a job holds GPUs there (a count cannot say which GPU the job has, so
lowering it could leave the job on the fenced one while Slurm believes otherwise), or when
slurmctld refuses the new count. Slurm 22.05 refuses it on every node whose GPUs come from
gres.conf ``File=`` lines ("Attempt to change gres/gpu Count ... invalid with File configuration";
a GPU without a File is dropped by slurmd, so every real GPU node has them): there the answer is
False and the node is drained, the issue's "drained when that cannot be done safely". A per-index
fence on such a node is a gres.conf edit on the node and a slurmd restart, which is configuration
management's, not a controller command.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from .base import CHECK_HOLD, OWNER, DrainState, SchedulerAdapter, SchedulerConflict, SchedulerError, check_hold_reason

logger = logging.getLogger(__name__)

REASON_PREFIX = f"{OWNER}:"
# Job states that hold a node: running, completing (epilog, processes being killed),
# configuring (nodes booting for it) and suspended (it keeps its allocation).
ACTIVE_JOB_STATES = "R,CG,CF,S"
# Every job state that keeps an allocation on the node, for "is the node free for a check":
# also stopped, staging out, signaling and resizing jobs.
ALLOCATED_JOB_STATES = "R,CG,CF,S,ST,SO,SI,RS"
# Jobs that evict moves off (completing ones are already on their way out).
EVICTABLE_JOB_STATES = "R,CF,S"
# Why a pending job waits, when giving a held node back would let it start: its nodes are
# unavailable (drained by the hold) or busy. Dependency, BeginTime, held jobs, QOS/association
# limits and the like would not start on the node anyway.
WAITING_FOR_NODES = ("ReqNodeNotAvail", "Resources", "Nodes_required_for_job", "Priority")
# Pending jobs one question reads (squeue lists them by priority, the likeliest to start first).
PENDING_JOBS_READ = 500
# A Slurm node name, never a hostlist expression: "gpu[01-04]" or "a,b" would act on many nodes.
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# The fenced GPUs in the node's Comment: "nodewarden-gpu-fence: 2,5 of 8" (indices, configured count).
FENCE_RE = re.compile(r"\s*nodewarden-gpu-fence: (?P<indices>\d+(?:,\d+)*) of (?P<total>\d+)")
# One gpu GRES entry: "gpu:8", "gpu:a100:8", "gpu:a100:8(S:0-1)".
GPU_GRES_RE = re.compile(r"^gpu(?::(?P<type>[^:,()]+))?:(?P<count>\d+)(?:\([^)]*\))?$")
# "admin: bad DIMM [root@2026-11-22T07:40:57]": who set the reason and when.
REASON_RE = re.compile(r"^(?P<text>.*?)(?: \[(?P<user>[^@\]\s]+)@(?P<when>[^\]\s]+)\])?$")


@dataclass(frozen=True)
class SlurmNode:
    """What ``scontrol show node`` says about one node."""

    name: str
    state: str  # e.g. "MIXED+DRAIN", "IDLE+DRAIN+NOT_RESPONDING"
    alloc_cpus: int
    reason: str  # without the "[user@time]" suffix
    reason_user: str | None
    reason_time: str | None
    partitions: tuple[str, ...] = ()

    @property
    def flags(self) -> set[str]:
        return set(self.state.split("+"))

    @property
    def drain_flag(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)

    @property
    def check_hold(self) -> bool:
        """A drain that an active check set (and nothing has taken over since)."""
        return self.reason.startswith(f"{REASON_PREFIX} {CHECK_HOLD}")

    @property
    def owner(self) -> str | None:
        if not self.reason:
            return None
        return OWNER if self.ours else self.reason_user

    def describe(self) -> str:
        text = f"State={self.state}"
        if self.reason:
            text += f" Reason={self.reason}"
            if self.reason_user:
                text += f" [{self.reason_user}@{self.reason_time}]"
        return text


@dataclass(frozen=True)
class SlurmGres:
    """A node's gpu GRES as ``scontrol -d show node`` has it, with our fence record."""

    name: str
    entry: str  # "gpu:a100:8(S:0-1)"
    gpu_type: str | None
    total: int  # configured GPUs, before any fence of ours
    fenced: set[int]
    used: int  # GPUs allocated to jobs now (GresUsed)
    other_comment: str  # the Comment without our record: an admin's words, kept


class SlurmAdapter(SchedulerAdapter):
    """One Slurm cluster, reached with its command-line tools."""

    kind = "slurm"
    command_timeout = 30.0  # seconds per command: scontrol retries an unreachable slurmctld for ~10 s

    # --- Reading --------------------------------------------------------------------------------
    def is_running_work(self, node: Any) -> bool:
        return bool(self.jobs_on(node, ACTIVE_JOB_STATES))

    def work_summary(self, node: Any) -> str:
        """Jobs holding an allocation on the node, or CPUs still allocated there (a job being set
        up or torn down shows there before or after squeue lists it); "" when the node is free."""
        jobs = self.jobs_on(node, ALLOCATED_JOB_STATES)
        info = self.show_node(node)
        if jobs:
            return f"Slurm job(s) {', '.join(jobs)} allocated on {info.name} ({info.describe()})"
        if info.alloc_cpus or "COMPLETING" in info.flags:
            return f"Slurm has {info.alloc_cpus} CPU(s) allocated on {info.name} ({info.describe()})"
        return ""

    def drain_state(self, node: Any) -> DrainState:
        info = self.show_node(node)
        jobs = self.jobs_on(node, ACTIVE_JOB_STATES)
        idle = info.alloc_cpus == 0 and "COMPLETING" not in info.flags and not jobs
        return DrainState(
            cordoned=info.drain_flag,
            drained=info.drain_flag and idle,
            running_jobs=len(jobs),
            owner=info.owner,
            detail=info.describe(),
        )

    def show_node(self, node: Any) -> SlurmNode:
        """The node as ``scontrol show node`` has it.

        The multi-line form, not ``-o``: there Comment= and Extra= follow Reason= on the one
        line, and all three may hold spaces. (``scontrol --json`` prints nothing in 22.05, and
        ``sinfo --json`` ignores ``-n`` and returns every node of the cluster.)
        """
        name = self.slurm_name(node)
        fields: dict[str, str] = {}
        reason = ""
        for line in self._run("scontrol", "show", "node", name).splitlines():
            line = line.strip()
            if line.startswith("Reason="):
                reason = line.removeprefix("Reason=")
                continue
            for token in line.split():
                key, sep, value = token.partition("=")
                if sep:
                    fields.setdefault(key, value)
        if fields.get("NodeName") != name:
            raise SchedulerError(f"scontrol show node {name}: no such node in its answer")
        match = REASON_RE.match(reason)
        assert match is not None  # noqa: S101 - the pattern matches every string
        return SlurmNode(
            name=name,
            state=fields.get("State", "UNKNOWN"),
            alloc_cpus=int(fields.get("CPUAlloc", "0") or 0),
            reason=match["text"],
            reason_user=match["user"],
            reason_time=match["when"],
            partitions=tuple(filter(None, fields.get("Partitions", "").split(","))),
        )

    def wants_node(self, node: Any) -> str | None:
        """A pending job that would start on the node if it were given back, or None.

        A job wants the node when it names it (``-w``: squeue's requested node list) or, naming
        none, runs in one of the node's partitions, and waits for nodes (``WAITING_FOR_NODES``:
        a job held by a dependency or a limit would not start anyway) and does not exclude it.
        Slurm names ReqNodeNotAvail before an unmet dependency, so the dependency (%E) is read too.
        """
        info = self.show_node(node)
        out = self._run("squeue", "-h", "-t", "PD", "--sort=-p", "-o", "%i|%P|%n|%x|%E|%r")
        for line in out.splitlines()[:PENDING_JOBS_READ]:
            job, partitions, requested, excluded, dependency, why = (line.split("|", 5) + [""] * 6)[:6]
            if not why.startswith(WAITING_FOR_NODES) or dependency.strip() not in ("", "(null)"):
                continue
            if info.name in self._hostnames(excluded):
                continue
            if requested.strip():
                if info.name in self._hostnames(requested):
                    return f"Slurm job {job} asks for {info.name} and is pending ({why})"
            elif set(partitions.split(",")) & set(info.partitions):
                return f"Slurm job {job} in partition {partitions} is pending ({why})"
        return None

    def _hostnames(self, expression: str) -> set[str]:
        """A Slurm hostlist ("gpu-s-[01-03]") as names; plain names without asking scontrol."""
        expression = expression.strip()
        if not expression or expression == "(null)":
            return set()
        if "[" not in expression:
            return set(expression.split(","))
        return set(self._run("scontrol", "show", "hostnames", expression).split())

    def jobs_on(self, node: Any, states: str) -> list[str]:
        """Ids of the jobs on the node in the given squeue states (%A: one id per array task)."""
        out = self._run("squeue", "-h", "-w", self.slurm_name(node), "-t", states, "-o", "%A")
        return out.split()

    # --- Acting ---------------------------------------------------------------------------------
    def cordon(self, node: Any, *, reason: str) -> None:
        """No new jobs: in Slurm, a drain (see the module docstring)."""
        self.drain(node, reason=reason)

    def drain(self, node: Any, *, reason: str) -> None:
        info = self.show_node(node)
        if info.drain_flag and not info.ours:
            logger.info(
                "%s is already drained by %s (%s); leaving their drain in place",
                info.name,
                info.reason_user,
                info.reason,
            )
            return
        if info.drain_flag and info.reason == _reason_text(reason):
            return  # ours already, for this reason
        # Not drained, ours for another reason (the reason follows the node's state), or only held for
        # an active check: the lifecycle's drain takes it over.
        self._set_drain(info.name, reason)

    def uncordon(self, node: Any, *, reason: str) -> None:
        info = self.show_node(node)
        if not info.drain_flag:
            return
        if not info.ours:
            raise SchedulerConflict(
                f"{info.name} was drained by {info.reason_user or 'someone else'}"
                f"{' at ' + info.reason_time if info.reason_time else ''} with reason {info.reason!r}; "
                f"{OWNER} lifts only its own drains"
            )
        self._resume(node, info, reason)

    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        """Drain with "nodewarden: active check ..."; a drain already there is left as it is."""
        info = self.show_node(node)
        if info.drain_flag:
            return info.check_hold  # another check's hold is ours to share; any other drain is not
        self._set_drain(info.name, check_hold_reason(reason))
        return True

    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        """Resume the node only while its drain reason is still the check's."""
        info = self.show_node(node)
        if not info.drain_flag:
            return True
        if not info.check_hold:
            logger.info("%s: drain is no longer the check's (%s); leaving it", info.name, info.describe())
            return False
        self._resume(node, info, reason)
        return True

    def evict(self, node: Any, *, reason: str) -> None:
        """Drain, then requeue every job on the node now (cancel those that cannot be requeued)."""
        self.drain(node, reason=reason)
        name = self.slurm_name(node)
        requeued, cancelled = [], []
        for job in self.jobs_on(node, EVICTABLE_JOB_STATES):
            try:
                self._run("scontrol", "requeue", job)
                requeued.append(job)
            except SchedulerError as exc:
                logger.warning("job %s on %s cannot be requeued, cancelling it: %s", job, name, exc)
                self._run("scancel", job)
                cancelled.append(job)
        if requeued or cancelled:
            summary = "; ".join(
                filter(
                    None,
                    [
                        f"requeued {','.join(requeued)}" if requeued else "",
                        f"cancelled {','.join(cancelled)} (not requeueable)" if cancelled else "",
                    ],
                )
            )
            logger.info("evicted %s: %s", name, summary)
            if self.show_node(node).ours:
                # The reason is the record Slurm's own admins see (sinfo -R) and drain_state's detail.
                self._set_drain(name, f"{reason} (evicted: {summary})")

    # --- GPUs -------------------------------------------------------------------------------------
    def fence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Lower the node's gpu GRES count by the newly fenced GPUs and record their indices in its
        Comment; False where that is not safe or slurmctld refuses (see the module docstring)."""
        gres = self._gres(node)
        if gres is None:
            return False
        fenced, total = gres.fenced, gres.total
        wanted = fenced | set(indices)
        if wanted == fenced:
            return True  # already fenced by us
        if any(index >= total for index in wanted) or gres.used:
            logger.info(
                "%s: GPU fence refused (indices %s of %s, GPUs in use: %s)", gres.name, wanted, total, gres.used
            )
            return False
        try:
            self._set_gpus(gres, wanted)
        except SchedulerError as exc:
            logger.info("%s: slurmctld refuses to fence GPUs %s: %s", gres.name, sorted(indices), exc)
            return False
        logger.info("%s: fenced GPUs %s (%s)", gres.name, sorted(wanted), reason)
        return True

    def unfence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Give back the GPUs our Comment records as fenced; True when none of these is recorded."""
        gres = self._gres(node)
        if gres is None or not gres.fenced & set(indices):
            return True  # nothing of ours to undo
        try:
            self._set_gpus(gres, gres.fenced - set(indices))
        except SchedulerError as exc:
            logger.info("%s: slurmctld refuses to give GPUs %s back: %s", gres.name, sorted(indices), exc)
            return False
        return True

    def _gres(self, node: Any) -> SlurmGres | None:
        """The node's one gpu GRES, GPUs in use and our fence record; None without a single gpu GRES."""
        name = self.slurm_name(node)
        fields: dict[str, str] = {}
        for line in self._run("scontrol", "-d", "show", "node", name).splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key in ("Gres", "GresUsed", "Comment"):
                fields[key] = value
        gpus = [entry for entry in fields.get("Gres", "").split(",") if GPU_GRES_RE.match(entry)]
        if len(gpus) != 1:
            return None
        match = GPU_GRES_RE.match(gpus[0])
        assert match is not None  # noqa: S101 - filtered above
        comment = "" if fields.get("Comment", "(null)") == "(null)" else fields["Comment"]
        record = FENCE_RE.search(comment)
        used = sum(int(m["count"]) for e in fields.get("GresUsed", "").split(",") if (m := GPU_GRES_RE.match(e)))
        return SlurmGres(
            name=name,
            entry=gpus[0],
            gpu_type=match["type"],
            total=int(record["total"]) if record else int(match["count"]),
            fenced={int(i) for i in record["indices"].split(",")} if record else set(),
            used=used,
            other_comment=FENCE_RE.sub("", comment).strip(),
        )

    def _set_gpus(self, gres: SlurmGres, fenced: set[int]) -> None:
        """The gpu count less the fenced ones, then the Comment that records them."""
        kind = f"gpu:{gres.gpu_type}" if gres.gpu_type else "gpu"
        self._run("scontrol", "update", f"nodename={gres.name}", f"gres={kind}:{gres.total - len(fenced)}")
        record = f"nodewarden-gpu-fence: {','.join(map(str, sorted(fenced)))} of {gres.total}" if fenced else ""
        comment = " ".join(filter(None, [gres.other_comment, record]))
        self._run("scontrol", "update", f"nodename={gres.name}", f"comment={comment}")

    # --- Plumbing -------------------------------------------------------------------------------
    def slurm_name(self, node: Any) -> str:
        name = self.node_name(node)
        if not NODE_NAME_RE.match(name):
            raise SchedulerError(f"{name!r} is not a plain Slurm node name (hostlist characters are refused)")
        return name

    def _resume(self, node: Any, info: SlurmNode, reason: str) -> None:
        try:
            self._run("scontrol", "update", f"nodename={info.name}", "state=resume")
        except SchedulerError:
            # A node with no slurmd (UNKNOWN) answers "Invalid node state specified" yet loses
            # its DRAIN flag: what we asked for happened.
            if self.show_node(node).drain_flag:
                raise
        logger.info("resumed %s (%s)", info.name, reason)

    def _set_drain(self, name: str, reason: str) -> None:
        self._run("scontrol", "update", f"nodename={name}", "state=drain", f"reason={_reason_text(reason)}")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        endpoint = str(getattr(self.cluster, "scheduler_endpoint", "") or "")
        if endpoint.startswith("/"):
            # Checked here: every Slurm command retries a missing slurm.conf for 60 s before failing.
            if not os.path.isfile(endpoint):
                raise SchedulerError(f"Slurm configuration {endpoint} (the cluster's scheduler endpoint) is not a file")
            env["SLURM_CONF"] = endpoint
        return env

    def _run(self, *command: str) -> str:
        """Run one Slurm command; its stdout, or SchedulerError saying what failed and how."""
        env = self._env()
        where = f" (SLURM_CONF={env['SLURM_CONF']})" if "SLURM_CONF" in env else ""
        shown = " ".join(command)
        try:
            result = subprocess.run(
                list(command),
                env=env,
                capture_output=True,
                text=True,
                timeout=self.command_timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise SchedulerError(f"{shown}{where} timed out after {self.command_timeout:g} s") from exc
        except OSError as exc:
            raise SchedulerError(f"{shown}{where} could not run: {exc}") from exc
        if result.returncode != 0:
            stderr = result.stderr.strip() or result.stdout.strip() or "(no output)"
            raise SchedulerError(f"{shown}{where} exited {result.returncode}: {stderr}")
        return result.stdout


def _reason_text(reason: str) -> str:
    """The drain reason as Slurm keeps it: ours marked, on one line (scontrol keeps it verbatim)."""
    return " ".join(f"{REASON_PREFIX} {reason}".split())
