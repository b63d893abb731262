"""Fixtures of the InfiniBand tests: the diags' real outputs (captured from ibsim + opensm,
see fixtures/ and shared/reference/ib/) and live simulated fabrics.

A simulated fabric needs ibsim, opensm, infiniband-diags and libumad2sim (bin/test installs
them): without them its tests skip, and in CI they fail instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.topology import GeneratedFabric, generate_fat_tree
from sandbox.emulators.fabric import SimulatedFabric, missing_components
from tests.conftest import IN_CI

FIXTURES = Path(__file__).parent / "fixtures"
# Small enough for ibsim to start in ~0.1 s: 2 rails x 2 leaves, 2 spines, 8 hosts x 2 HCAs.
SMALL = {"hosts": 8, "hcas_per_host": 2, "leaves": 4, "spines": 2, "switch_ports": 8}


def captured(name: str) -> str:
    """A real output from fixtures/ (copied from shared/reference/ib/)."""
    return (FIXTURES / name).read_text()


def require_ibsim() -> None:
    missing = missing_components()
    if missing:
        if IN_CI:
            pytest.fail(f"{', '.join(missing)} required in CI (bin/test installs them)")
        pytest.skip(f"no simulated fabric here: {', '.join(missing)} missing")


@pytest.fixture
def small_fabric() -> GeneratedFabric:
    return generate_fat_tree(**SMALL)


@pytest.fixture
def sim(small_fabric: GeneratedFabric) -> Iterator[SimulatedFabric]:
    """The small fabric, live; a fresh ibsim + opensm per test (faults do not leak)."""
    require_ibsim()
    with SimulatedFabric(small_fabric, sweep_interval=1) as fabric:
        yield fabric
