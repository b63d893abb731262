"""The one reader of the environment: django-environ, strict.

nodewarden/settings.py is the only module that calls it; everything else reads
``django.conf.settings``. A malformed value stops start-up with an error that names
the variable, and every variable may also be given as ``NAME_FILE`` (a path:
Docker/Kubernetes secrets), which wins over ``NAME``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_WHAT = {int: "an integer", float: "a number", bool: "a boolean (true/false, 1/0, yes/no)", json.loads: "JSON"}


class Env(environ.Env):
    """django-environ's reader with three changes that make it fail loudly.

    - A value that does not parse raises ImproperlyConfigured naming the variable (django-environ
      lets Python's bare ValueError through), and booleans other than true/false, 1/0, yes/no,
      on/off are refused (django-environ reads any other word as false).
    - Floats parse as Python does: django-environ strips every non-digit first, so "1x5" is 15.
    - No "$OTHER" proxying: a secret that starts with "$" is that secret, not another variable.
    """

    def get_value(
        self, var: str, cast: Any = None, default: Any = environ.Env.NOTSET, parse_default: bool = False
    ) -> Any:
        raw = _raw(var)
        if raw is None:
            if default is self.NOTSET:
                raise ImproperlyConfigured(f"Set the {var} environment variable")
            return default
        if cast is None and default is not None and default is not self.NOTSET:
            cast = type(default)
        if raw.strip() == "" and cast in (int, float, json.loads) and default is not self.NOTSET:
            return default  # "VAR=" in a compose file means unset
        try:
            return self.parse_value(raw, cast)
        except (ValueError, TypeError) as exc:
            what = _WHAT.get(cast, "valid")
            raise ImproperlyConfigured(f"{var}={raw!r} is not {what}: {exc}") from exc

    @classmethod
    def parse_value(cls, value: str, cast: Any) -> Any:
        if cast is bool:
            word = value.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ValueError("expected true/false, 1/0, yes/no or on/off")
        if cast is float:
            return float(value)
        if cast is list:
            return [item.strip() for item in value.split(",") if item.strip()]
        return super().parse_value(value, cast)


def _raw(var: str) -> str | None:
    """NAME_FILE's contents (stripped: editors end files with a newline), else NAME, else None."""
    path = os.environ.get(f"{var}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{var}_FILE={path!r} cannot be read: {exc}") from exc
    return os.environ.get(var)


env = Env()
