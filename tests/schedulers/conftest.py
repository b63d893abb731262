"""Slurm fixtures of the scheduler tests; the shared cluster (``slurm_session``, ``slurm``,
``slurm_cluster``) is in tests/conftest.py, defined once so that one cluster serves every module.
"""

from __future__ import annotations

import pytest

from sandbox.emulators.slurm import SlurmCluster
from schedulers.slurm import SlurmAdapter
from tests.conftest import require_slurm
from tests.factories import NodeFactory


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
