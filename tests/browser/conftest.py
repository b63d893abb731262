"""Headless Chromium from Debian, driven by Playwright (no downloaded browser)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import IN_CI

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

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


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """Where the layout tests keep a screenshot of each page at each width: $NODEWARDEN_SCREENSHOT_DIR,
    else var/screenshots in the checkout (bin/test sets and prints it; kept after the run)."""
    default = Path(__file__).resolve().parents[2] / "var" / "screenshots"
    path = Path(os.environ.get("NODEWARDEN_SCREENSHOT_DIR") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def csp_violations(page):
    """Fails the test on any Content-Security-Policy violation the portal's pages cause.

    Two witnesses: the browser's console ("Refused to ... because it violates ...") and the DOM's
    securitypolicyviolation event, reported through a binding Playwright installs in every page
    (its init script runs outside the page's CSP, so the listener itself violates nothing).
    """
    violations: list[str] = []
    page.expose_function("__nwCspViolation", lambda text: violations.append(f"securitypolicyviolation: {text}"))
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', function (e) {"
        " window.__nwCspViolation(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline')"
        " + ' at ' + e.documentURI + (e.lineNumber ? ':' + e.lineNumber : '')); });"
    )
    page.on(
        "console",
        lambda msg: (
            violations.append(f"console: {msg.text}")
            if "Content Security Policy" in msg.text or "Content-Security-Policy" in msg.text
            else None
        ),
    )
    yield violations
    assert violations == [], "the page broke its Content-Security-Policy:\n" + "\n".join(violations)
