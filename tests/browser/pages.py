"""Helpers for driving the portal in a browser test."""

from __future__ import annotations

from typing import Any


def watch_for_errors(page: Any) -> list[str]:
    """Collect JavaScript errors, console errors and 5xx answers seen while a test drives ``page``."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    page.on("response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 500 else None)
    return errors


def log_in(page: Any, base: str, username: str, password: str = "password") -> None:
    """Log in through the login form (with the fixtures' password unless told)."""
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
