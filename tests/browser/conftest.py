"""Headless Chromium from Debian, driven by Playwright (no downloaded browser)."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import IN_CI

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# Playwright's sync API runs an event loop in the test thread; Django's ORM calls made by the
# test itself (fixtures) are still synchronous and safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not shutil.which(CHROMIUM):
        if IN_CI:
            pytest.fail(f"Chromium is required in CI but {CHROMIUM} is missing (bin/test installs it)")
        pytest.skip(f"{CHROMIUM} not installed")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1366, "height": 900}}

