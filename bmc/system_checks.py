"""System checks: a malformed NODEWARDEN_BMC_KEYS fails ``manage.py check`` and start-up, not the first BMC call."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured


@checks.register(checks.Tags.security)
def check_credential_keys(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .fields import credential_cipher

    try:
        credential_cipher()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="bmc.E001")]
    return []
