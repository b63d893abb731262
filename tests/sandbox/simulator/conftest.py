"""The simulator's tests that run the whole system need sushy-tools (its Redfish emulators)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import IN_CI


@pytest.fixture
def sushy() -> None:
    """Skip (fail in CI) without sushy-tools; modules that need it use it autouse."""
    if importlib.util.find_spec("sushy_tools") is None:
        if IN_CI:
            pytest.fail("sushy-tools is required in CI (bin/test installs it)")
        pytest.skip("sushy-tools is not installed")
