"""Reactions for many nodes at once reach Slurm 22.05 in a handful of commands, each node with its own reason.

A burst of catastrophic findings cordons hundreds of nodes of one cluster within seconds; one
``scontrol`` per node per reaction would spend the time on process start-up and slurmctld round
trips. The counts below are of the Slurm commands actually run (``subprocess.run`` of scontrol,
squeue, scancel), so they hold for any way of batching. Nodes without a slurmd are cloud nodes
(``idle~``: they drain and resume like real ones, and 24 slurmd processes would load this machine).
"""

from __future__ import annotations

import subprocess

import pytest
from django.db import transaction

from fleet.choices import SchedulerKind
from nodes import services
from nodes.choices import NodeState
from sandbox.emulators.slurm import SlurmCluster
from schedulers.base import SchedulerConflict, SchedulerError
from schedulers.models import PendingReaction
from schedulers.slurm import SlurmAdapter
from tests.factories import ClusterFactory, NodeFactory
from tests.schedulers.conftest import require_slurm
from tests.validation.conftest import eager  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db
S = NodeState
ACTOR = services.Actor.system("test")
WORKERS = ["gpu-b-01", "gpu-b-02"]  # with a slurmd: jobs run there
CLOUD = [f"gpu-c-{i:02}" for i in range(1, 25)]
SLURM_COMMANDS = ("scontrol", "squeue", "scancel")  # sinfo: only the tests read with it


@pytest.fixture(scope="module")
def burst_slurm():
    require_slurm()
    with SlurmCluster(WORKERS, cloud_nodes=CLOUD) as slurm:
        yield slurm


@pytest.fixture
def bslurm(burst_slurm):
    """The module's cluster, every job cancelled and every node resumed after the test."""
    yield burst_slurm
    burst_slurm.run("scontrol", "update", f"nodename={','.join(CLOUD)}", "state=resume", check=False)
    burst_slurm.reset()


@pytest.fixture
def cluster(db, bslurm):
    return ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint=str(bslurm.conf_path))


@pytest.fixture
def slurm_calls(monkeypatch):
    """The Slurm commands run while the test acts (argv lists), counted at subprocess.run."""
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(args, *a, **kw):
        if isinstance(args, list | tuple) and args and str(args[0]) in SLURM_COMMANDS:
            calls.append([str(arg) for arg in args])
        return real(args, *a, **kw)

    monkeypatch.setattr(subprocess, "run", counting)
    return calls


def reasons(slurm) -> dict[str, str]:
    out = slurm.run("sinfo", "-R", "-h", "-N", "-o", "%N|%E").stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_a_burst_of_cordons_takes_two_scontrol_calls_and_each_node_keeps_its_reason(cluster, bslurm, slurm_calls):
    nodes = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster) for name in CLOUD]
    outcome = SlurmAdapter(cluster).apply_many("cordon", [(n, f"Triage: XID 79 on {n.hostname}") for n in nodes])
    assert outcome == {n.pk: None for n in nodes}
    assert len(slurm_calls) <= 2, slurm_calls  # one show for all, one scontrol reading the updates
    shown = reasons(bslurm)
    for name in CLOUD:
        assert shown[name] == f"nodewarden: Triage: XID 79 on {name}.dc1.example.net", name


def test_a_host_slurm_does_not_know_fails_alone(cluster, bslurm, slurm_calls):
    nodes = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster) for name in CLOUD[:6]]
    ghost = NodeFactory(hostname="gpu-nowhere.dc1.example.net", cluster=cluster)
    shared = "Triage: one reason for all"
    outcome = SlurmAdapter(cluster).apply_many("drain", [(n, shared) for n in [*nodes[:3], ghost, *nodes[3:]]])
    assert isinstance(outcome.pop(ghost.pk), SchedulerError)
    assert outcome == {n.pk: None for n in nodes}
    shown = reasons(bslurm)
    assert all(shown[name] == f"nodewarden: {shared}" for name in CLOUD[:6])
    assert len(slurm_calls) <= 2, slurm_calls


def test_a_failed_update_line_falls_back_to_one_call_per_node(cluster, bslurm, slurm_calls, monkeypatch):
    """The batched update fails for one node although Slurm listed it a moment before (stood in for
    by renaming that host in the batch's input): the others are drained by the batch, and the
    check after it drains the missed node with a call of its own."""
    nodes = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster) for name in CLOUD[:4]]
    adapter = SlurmAdapter(cluster)
    real_exec = adapter._exec

    def lose_one_host(command, script=None):
        if script:  # the batch's updates: one of its hosts is renamed to one Slurm does not know
            script = script.replace("gpu-c-02", "gpu-gone-02")
        return real_exec(command, script)

    monkeypatch.setattr(adapter, "_exec", lose_one_host)
    outcome = adapter.apply_many("drain", [(n, f"Triage: node {n.pk}") for n in nodes])
    # The batch missed gpu-c-02; the check after it found so and drained it alone.
    assert outcome == {n.pk: None for n in nodes}
    shown = reasons(bslurm)
    assert all(shown[n.hostname.split(".")[0]] == f"nodewarden: Triage: node {n.pk}" for n in nodes)
    assert [
        "scontrol",
        "update",
        "nodename=gpu-c-02",
        "state=drain",
        f"reason=nodewarden: Triage: node {nodes[1].pk}",
    ] in (slurm_calls)


def test_evicting_many_requeues_their_jobs_in_one_call_and_says_so_per_node(cluster, bslurm, slurm_calls):
    nodes = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster) for name in WORKERS]
    jobs = {name: bslurm.submit(name, 300, "customer-train") for name in WORKERS}
    for job in jobs.values():
        bslurm.wait_job_running(job)
    slurm_calls.clear()
    outcome = SlurmAdapter(cluster).apply_many("evict", [(n, f"Triage: smoke {n.pk}") for n in nodes])
    acted = list(slurm_calls)  # show, updates, squeue, requeue, the updated reasons
    assert outcome == {n.pk: None for n in nodes}
    assert all(bslurm.job_state(job) in ("PD", "CA", "CG") for job in jobs.values())
    requeues = [call for call in acted if call[:2] == ["scontrol", "requeue"]]
    assert len(requeues) == 1 and len(acted) <= 5, acted
    shown = reasons(bslurm)
    for node in nodes:
        name = node.hostname.split(".")[0]
        assert shown[name] == f"nodewarden: Triage: smoke {node.pk} (evicted: requeued {jobs[name]})"


def test_resuming_many_lifts_only_our_drains(cluster, bslurm, slurm_calls):
    ours = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster) for name in CLOUD[:3]]
    admins = NodeFactory(hostname=f"{CLOUD[3]}.dc1.example.net", cluster=cluster)
    adapter = SlurmAdapter(cluster)
    adapter.apply_many("cordon", [(n, "Triage: earlier") for n in ours])
    bslurm.run("scontrol", "update", f"nodename={CLOUD[3]}", "state=drain", "reason=admin: bad DIMM")
    slurm_calls.clear()
    outcome = adapter.apply_many("resume", [(n, "Production: back") for n in [*ours, admins]])
    assert isinstance(outcome.pop(admins.pk), SchedulerConflict)
    assert outcome == {n.pk: None for n in ours}
    assert len(slurm_calls) <= 2, slurm_calls
    assert set(reasons(bslurm)) == {CLOUD[3]}  # the admin's drain stays, ours are lifted


def test_a_burst_of_cordon_transitions_reaches_slurm_in_a_few_calls(cluster, bslurm, slurm_calls, eager):  # noqa: F811
    """As when many catastrophic findings commit together: every cordon's reaction is queued with its
    transition, and the first follow-up to run carries them all out in one batch; the others find
    their node done. Each node's history and drain reason are its own."""
    nodes = [NodeFactory(hostname=f"{name}.dc1.example.net", cluster=cluster, state=S.PRODUCTION) for name in CLOUD]
    with eager(), transaction.atomic():
        for node in nodes:
            services.cordon(node.pk, actor=ACTOR, reason=f"XID 79 on {node.hostname}")
    assert not PendingReaction.objects.exists()
    assert len(slurm_calls) <= 4, slurm_calls  # show, updates, squeue (no job to requeue)
    shown = reasons(bslurm)
    for node in nodes:
        name = node.hostname.split(".")[0]
        assert shown[name] == f"nodewarden: Triage: XID 79 on {node.hostname}"
        assert node.events.filter(transition="cordon").count() == 1
