"""The demo's workload schedulers: one real Slurm cluster, and a stand-in Kubernetes API server.

bin/demo runs ``manage.py demo_schedulers``, which calls ``running_demo_schedulers``:

- **Slurm is real** (``sandbox.emulators.slurm.SlurmCluster``: munged, slurmctld, slurmd). One cluster
  holds the nodes of both demo Slurm clusters under their short host names (plus the bring-up bay,
  whose servers join ``iad1-train-a``). The first ``slurmd_per_cluster`` production nodes of each
  cluster by host name run a real slurmd and take real jobs; the rest are ``State=CLOUD`` nodes
  without a slurmd, which drain and resume cleanly and never run a job. Both clusters'
  ``scheduler_endpoint`` is the cluster's slurm.conf, so the Slurm adapter runs the real
  ``scontrol``/``squeue`` against it.
- **Kubernetes is a stand-in**: no kube-apiserver can run here, so kmock's KubernetesEmulator
  (HTTP on 127.0.0.1, objects in memory) serves a Node per demo node of the Kubernetes cluster,
  and the adapter talks to it with the official client, as it would to a real API server. It
  answers 401 (a real server's Status) to any request without the demo's bearer token, which
  the worker gets from ``NODEWARDEN_KUBERNETES_TOKENS`` (``DemoSchedulers.env_exports``).
- Slurm and Kubernetes start out agreeing with Nodewarden: demo nodes out of production for a
  fault (drain pending, draining, triage, remediation, repair, RMA) are drained or cordoned
  through the adapters, with Nodewarden's reason.

``submit_demo_jobs`` (beat, every minute, with NODEWARDEN_DEMO_CHURN) keeps a short customer
job (``sleep`` 2-5 min) on every idle slurmd-backed production node that the demo's job model
(``telemetry.node_has_job``) says is busy, ending before the model's slot does, so Slurm and the
node's reports agree (a node with a job there reports GPU processes), and a drain requested there
waits for the job: Slurm shows the node "draining", and a remediation's drain stays in Drain
pending until the job ends (the drain follower, schedulers.reactions, asks Slurm every minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import shlex
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet.choices import SchedulerKind
from fleet.models import Cluster
from nodes.choices import NodeState
from sandbox.emulators.slurm import SlurmCluster
from schedulers.base import SchedulerAdapter, adapter_for

from .bringup import BAY_CLUSTER, bay_servers
from .catalog import DEMO_SITE_SLUGS
from .seed import demo_fleet_exists, demo_nodes

log = logging.getLogger(__name__)
S = NodeState
SLURMD_PER_CLUSTER = 3
JOB_SECONDS = (120, 300)  # a demo customer job's length: long enough to watch a drain wait for it
JOB_END_MARGIN = 30  # seconds a demo job ends before its node's job slot (telemetry.JOB_SLOT_S)
JOB_TIME_LIMIT_MINUTES = 10  # Slurm ends a job that somehow outlives this
COMMAND_TIMEOUT = 20.0
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}  # kube-apiserver's answer


def short_name(hostname: str) -> str:
    return hostname.split(".", 1)[0]


def demo_clusters(kind: str) -> list[Cluster]:
    return list(Cluster.objects.filter(site__slug__in=DEMO_SITE_SLUGS, scheduler_kind=kind).order_by("name"))


def slurm_layout(slurmd_per_cluster: int = SLURMD_PER_CLUSTER) -> tuple[list[str], list[str]]:
    """(nodes with a real slurmd, nodes without one) for the demo's Slurm clusters, by short host name."""
    slurmd: list[str] = []
    cloud: list[str] = []
    for cluster in demo_clusters(SchedulerKind.SLURM):
        rows = demo_nodes().filter(cluster=cluster).order_by("hostname").values_list("hostname", "state")
        names = [(short_name(hostname), state) for hostname, state in rows]
        if cluster.name == BAY_CLUSTER:  # the bay's servers join this cluster once enrolled
            names += [(server["name"], S.ENROLLED) for server in bay_servers()]
        backed = [name for name, state in names if state == S.PRODUCTION][:slurmd_per_cluster]
        slurmd += backed
        cloud += [name for name, _ in names if name not in backed]
    return slurmd, list(dict.fromkeys(cloud))  # a bay server enrolled already is named twice


# --- The Kubernetes stand-in ---------------------------------------------------------------------


@dataclass
class KubeStandIn:
    """kmock's KubernetesEmulator on its own event loop in a thread, with a Node per demo node."""

    token: str
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    url: str = ""
    emulator: Any = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _thread: threading.Thread | None = None

    def start(self, nodes: list[str]) -> None:
        self._thread = threading.Thread(target=self.loop.run_forever, name="kube-stand-in", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(nodes), self.loop).result(timeout=30)

    async def _start(self, nodes: list[str]) -> None:
        import kmock

        self.emulator = await self._stack.enter_async_context(kmock.KubernetesEmulator())
        server = await self._stack.enter_async_context(kmock.Server(self.emulator))
        self.url = str(server.url).rstrip("/")
        bearer = f"Bearer {self.token}"
        # Above every other reaction: kmock itself checks no credentials.
        self.emulator[lambda request: request.headers.get("Authorization") != bearer].override << kmock.Response(
            status=401, payload=UNAUTHORIZED
        )
        # Declared, so that pod lists answer [] (kmock's 404 otherwise): the demo runs no pods here.
        self.emulator.resources[kmock.resource("v1/pods")] = {}
        self.emulator.resources[kmock.resource("v1/nodes")] = {}
        for name in nodes:
            self.emulator.objects[kmock.resource("v1/nodes"), None, name] = _kube_node(name)

    def node(self, name: str) -> dict[str, Any]:
        """The Node object as the stand-in holds it now."""
        import kmock

        async def read() -> dict[str, Any]:
            return dict(self.emulator.objects[kmock.resource("v1/nodes"), None, name].raw)

        return asyncio.run_coroutine_threadsafe(read(), self.loop).result(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._stack.aclose(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
        self._thread = None


def _kube_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": {},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def kmock_installed() -> bool:
    try:
        import kmock  # noqa: F401
    except ImportError:
        return False
    return True


# --- Both, started and attached ------------------------------------------------------------------


@dataclass
class DemoSchedulers:
    """What ``running_demo_schedulers`` started: the Slurm cluster and (if kmock is there) the stand-in."""

    slurm: SlurmCluster
    slurmd_nodes: list[str]
    cloud_nodes: list[str]
    kube: KubeStandIn | None = None
    kube_nodes: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # Kubernetes cluster name -> bearer token
    synced: int = 0  # demo nodes drained or cordoned at start to match Nodewarden

    def env_exports(self) -> str:
        """Shell lines for the worker and beat: the Kubernetes tokens (bin/demo sources them)."""
        tokens = {**_configured_tokens(), **self.tokens}
        return f"export NODEWARDEN_KUBERNETES_TOKENS={shlex.quote(json.dumps(tokens))}\n"

    def problem(self) -> str:
        """Why the schedulers stopped working, or "" while everything runs."""
        for name, process in self.slurm.processes.items():
            if process.poll() is not None:
                return f"{name} exited {process.returncode}:\n{self.slurm.log_tail(name)}"
        if self.kube is not None and not self.kube.alive:
            return "the Kubernetes stand-in's event loop stopped"
        return ""

    def describe(self) -> str:
        text = (
            f"Slurm (SLURM_CONF={self.slurm.conf_path}): {len(self.slurmd_nodes)} nodes with a slurmd "
            f"({', '.join(self.slurmd_nodes)}), {len(self.cloud_nodes)} without (State=CLOUD)"
        )
        if self.kube is not None:
            text += f"; Kubernetes stand-in (kmock) on {self.kube.url}: {len(self.kube_nodes)} nodes"
        return text + f"; {self.synced} nodes drained or cordoned to match Nodewarden."


def _configured_tokens() -> dict[str, str]:
    return dict(settings.NODEWARDEN_KUBERNETES_TOKENS)


@contextlib.contextmanager
def running_demo_schedulers(*, slurmd_per_cluster: int = SLURMD_PER_CLUSTER) -> Iterator[DemoSchedulers]:
    """Start the demo's Slurm cluster and Kubernetes stand-in, point the demo clusters at them,
    drain/cordon what Nodewarden has out of production; stop both on exit.

    Call it from the main thread: the Slurm daemons are told to die with the thread that started them.
    """
    slurmd, cloud = slurm_layout(slurmd_per_cluster)
    kube_clusters = demo_clusters(SchedulerKind.KUBERNETES)
    with contextlib.ExitStack() as stack:
        slurm = stack.enter_context(SlurmCluster(slurmd, cloud_nodes=cloud))
        demo = DemoSchedulers(slurm=slurm, slurmd_nodes=slurmd, cloud_nodes=cloud)
        Cluster.objects.filter(pk__in=[c.pk for c in demo_clusters(SchedulerKind.SLURM)]).update(
            scheduler_endpoint=str(slurm.conf_path)
        )
        if kube_clusters and kmock_installed():
            demo.kube = KubeStandIn(token=secrets.token_urlsafe(24))
            stack.callback(demo.kube.stop)
            demo.kube_nodes = sorted(
                {
                    short_name(h)
                    for h in demo_nodes().filter(cluster__in=kube_clusters).values_list("hostname", flat=True)
                }
            )
            demo.kube.start(demo.kube_nodes)
            Cluster.objects.filter(pk__in=[c.pk for c in kube_clusters]).update(scheduler_endpoint=demo.kube.url)
            demo.tokens = {c.name: demo.kube.token for c in kube_clusters}
        elif kube_clusters:
            log.warning("kmock is not installed: the demo's Kubernetes cluster gets no stand-in API server")
        demo.synced = _match_nodewarden(demo)
        yield demo


def _match_nodewarden(demo: DemoSchedulers) -> int:
    """Drain (Slurm) or cordon (Kubernetes) every demo node the reactions table wants out of its
    scheduler (``schedulers.reactions.STATE_REACTION``: out of production for a fault, and Day 1
    nodes being validated), through the adapters, with the reason the reactions would give."""
    from django.test import override_settings

    from schedulers.reactions import STATE_REACTION, Reaction, scheduler_reason

    kinds = [SchedulerKind.SLURM] + ([SchedulerKind.KUBERNETES] if demo.kube is not None else [])
    out = [state for state, reaction in STATE_REACTION.items() if reaction in (Reaction.CORDON, Reaction.DRAIN)]
    nodes = demo_nodes().filter(state__in=out, cluster__scheduler_kind__in=kinds).select_related("cluster")
    adapters: dict[int, SchedulerAdapter] = {}
    # The adapter reads its token from settings; this process's settings predate the stand-in's token.
    with override_settings(NODEWARDEN_KUBERNETES_TOKENS={**_configured_tokens(), **demo.tokens}):
        for node in nodes.order_by("hostname"):
            adapter = adapters.setdefault(node.cluster_id, adapter_for(node.cluster))
            adapter.drain(node, reason=scheduler_reason(node.state, "when the demo started"))
    return nodes.count()


# --- Demo customer jobs --------------------------------------------------------------------------


def _slurm(conf: str, *command: str) -> str:
    result = subprocess.run(
        list(command),
        env={**os.environ, "SLURM_CONF": conf},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def _idle_slurmd_nodes(conf: str) -> set[str]:
    """Nodes that run a slurmd, take work and run nothing now: sinfo's plain "idle".
    (Nodes without a slurmd are "idle~"; "idle*" does not answer; drained ones say so.)"""
    out = _slurm(conf, "sinfo", "-h", "-N", "-o", "%N %T")
    return {name for name, state in (line.split() for line in out.splitlines() if line.strip()) if state == "idle"}


@shared_task(name="sandbox.demo.submit_demo_jobs")
def submit_demo_jobs(seed: int | None = None) -> str:
    """Give every idle slurmd-backed demo node in production a short customer job (sleep 2-5 min).

    Runs every minute from Celery beat when NODEWARDEN_DEMO_CHURN is set; a no-op otherwise,
    and without the demo fleet or a demo Slurm cluster started by ``manage.py demo_schedulers``.
    """
    if not settings.NODEWARDEN_DEMO_CHURN:
        return "disabled"
    if not demo_fleet_exists():
        return "no demo fleet"
    rng = random.Random(seed)
    rows = list(
        demo_nodes()
        .filter(state=S.PRODUCTION, cluster__scheduler_kind=SchedulerKind.SLURM)
        .values_list("hostname", "tenant__slug")
    )
    production = {short_name(hostname): tenant or "unassigned" for hostname, tenant in rows}
    hostnames = [hostname for hostname, _ in rows]
    # Both demo Slurm clusters point at the one slurm.conf; a name instead of a path: not started.
    confs = sorted(
        {
            c.scheduler_endpoint
            for c in demo_clusters(SchedulerKind.SLURM)
            if c.scheduler_endpoint.startswith("/") and os.path.isfile(c.scheduler_endpoint)
        }
    )
    if not confs:
        return "no demo Slurm cluster (manage.py demo_schedulers is not running)"
    from .telemetry import job_seconds_left, node_has_job

    now = timezone.now()
    busy = {
        short_name(h): h for h in hostnames if node_has_job(h, now) and job_seconds_left(h, now) > JOB_END_MARGIN + 60
    }
    submitted: list[str] = []
    for conf in confs:
        try:
            for name in sorted(_idle_slurmd_nodes(conf) & production.keys() & busy.keys()):
                # Ends before the model's slot: a node whose reports say idle has no job in Slurm.
                seconds = min(rng.randint(*JOB_SECONDS), job_seconds_left(busy[name], now) - JOB_END_MARGIN)
                job = (
                    _slurm(
                        conf,
                        "sbatch",
                        "--parsable",
                        "--no-requeue",
                        "-w",
                        name,
                        "-J",
                        f"{production[name]}-train",
                        f"--time={JOB_TIME_LIMIT_MINUTES}",
                        "-o",
                        "/dev/null",
                        "--wrap",
                        f"sleep {seconds}",
                    )
                    .strip()
                    .split(";")[0]
                )
                submitted.append(f"job {job} on {name} ({seconds} s)")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            log.warning("demo jobs: Slurm (SLURM_CONF=%s) did not take them: %s", conf, exc)
            return f"Slurm did not answer: {exc}"
    return f"{len(submitted)} jobs submitted" + (": " + "; ".join(submitted) if submitted else "")
