"""A real Slurm 22.05 cluster for the scheduler tests (sandbox.emulators.slurm).

One cluster per session (with xdist, one per worker, each on its own free ports); every test
that uses it gets all jobs cancelled and all nodes idle afterwards. Outside CI the tests skip
when Slurm is not installed or we are not root; in CI that is a failure.
"""

from __future__ import annotations

import os

import pytest

from fleet.choices import SchedulerKind
from sandbox.emulators.slurm import SlurmCluster, slurm_installed
from schedulers.slurm import SlurmAdapter
from tests.conftest import IN_CI
from tests.factories import ClusterFactory, NodeFactory

SLURM_NODES = ["gpu-s-01", "gpu-s-02", "gpu-s-03", "gpu-s-04"]


def require_slurm() -> None:
    if not slurm_installed():
        what = "Slurm and munge (apt-get install slurm-wlm munge)"
    elif os.geteuid() != 0:
        what = "root, to run slurmd and munged"
    else:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI (bin/test installs the packages and runs as root)")
    pytest.skip(f"{what} is not available")


@pytest.fixture(scope="session")
def slurm_session():
    require_slurm()
    with SlurmCluster(SLURM_NODES) as slurm:
        yield slurm


@pytest.fixture
def slurm(slurm_session):
    """The session's cluster, put back to all-idle and no jobs after the test."""
    yield slurm_session
    slurm_session.reset()


@pytest.fixture
def slurm_cluster(db, slurm):
    return ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint=str(slurm.conf_path))


@pytest.fixture
def adapter(slurm_cluster):
    return SlurmAdapter(slurm_cluster)


@pytest.fixture
def slurm_node(slurm_cluster):
    """A Node row whose short host name is the given Slurm node."""

    def make(name: str):
        return NodeFactory(hostname=f"{name}.dc1.example.net", cluster=slurm_cluster)

    return make


GPU_NODES = ["gpu-f-01", "gpu-f-02"]


@pytest.fixture(scope="session")
def slurm_gpu_session():
    """A second cluster whose nodes have 4 GPUs each (gres/gpu backed by fake device files)."""
    require_slurm()
    with SlurmCluster(GPU_NODES, gpus=4) as slurm:
        yield slurm


@pytest.fixture
def slurm_gpus(slurm_gpu_session):
    yield slurm_gpu_session
    slurm_gpu_session.reset()
