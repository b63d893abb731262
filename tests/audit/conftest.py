"""The fleet auditor's tests: no grace (a node planted a moment ago is settled), small bounds."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def audit_settings(settings):
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 0
    settings.NODEWARDEN_AUDIT_SEVERITY = "degraded"
    return settings
