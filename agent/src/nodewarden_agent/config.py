"""Agent configuration: environment variables, optionally a small JSON file underneath.

Every setting is ``NODEWARDEN_<NAME>`` in the environment or ``"<name>"`` in the JSON
file named by ``NODEWARDEN_CONFIG`` (or ``--config``); the environment wins. A malformed
value stops the agent at start with a message naming the setting: an agent that runs
with a silently defaulted interval or state folder is worse than one that refuses.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = "/var/lib/nodewarden-agent"


class ConfigError(ValueError):
    """A setting is missing or malformed."""


@dataclass(frozen=True)
class Config:
    """Everything the agent needs to know before its first cycle."""

    url: str = ""
    token: str = field(default="", repr=False)
    interval_s: float = 30.0
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    hostname: str = ""
    expected_gpus: int | None = None
    spool_max_reports: int = 20_000  # ~1 week of 30 s reports
    spool_max_bytes: int = 512 * 1024 * 1024
    batch_size: int = 100
    check_poll_cycles: int = 4  # ask for active checks every 4th cycle (2 min at 30 s)
    check_watch_s: float = 5.0  # while a check runs, ask this often whether the portal still wants it
    request_timeout_s: float = 15.0
    backoff_min_s: float = 5.0
    backoff_max_s: float = 300.0

    @property
    def can_post(self) -> bool:
        return bool(self.url and self.token)


def _positive(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_positive(raw: str) -> Any:
        value = parse(raw)
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    return parse_positive


def _url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return raw.rstrip("/")


# setting name -> parser; the same names serve env (upper-cased, prefixed) and the file.
_PARSERS: dict[str, Callable[[str], Any]] = {
    "url": _url,
    "interval": _positive(float),
    "state_dir": Path,
    "hostname": str,
    "expected_gpus": _positive(int),
    "spool_max_reports": _positive(int),
    "spool_max_bytes": _positive(int),
    "batch_size": _positive(int),
    "check_poll_cycles": _positive(int),
    "check_watch": _positive(float),
    "request_timeout": _positive(float),
    "backoff_min": _positive(float),
    "backoff_max": _positive(float),
}
# setting name -> Config field where they differ (units live in the field name).
_FIELDS = {
    "interval": "interval_s",
    "request_timeout": "request_timeout_s",
    "backoff_min": "backoff_min_s",
    "backoff_max": "backoff_max_s",
    "check_watch": "check_watch_s",
}


def _read_file(path: str) -> dict[str, str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object")
    unknown = set(data) - set(_PARSERS) - {"token", "token_file"}
    if unknown:
        raise ConfigError(f"config file {path}: unknown settings {sorted(unknown)}")
    return {key: str(value) for key, value in data.items() if value is not None}


def _raw_settings(env: Mapping[str, str], config_file: str | None) -> dict[str, str]:
    path = config_file or env.get("NODEWARDEN_CONFIG")
    raw = _read_file(path) if path else {}
    for name in [*_PARSERS, "token", "token_file"]:
        value = env.get(f"NODEWARDEN_{name.upper()}")
        if value not in (None, ""):
            raw[name] = value
    return raw


def _token(raw: dict[str, str]) -> str:
    if raw.get("token"):
        return raw["token"].strip()
    if raw.get("token_file"):
        try:
            return Path(raw["token_file"]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"NODEWARDEN_TOKEN_FILE: cannot read {raw['token_file']}: {exc}") from exc
    return ""


def load_config(
    env: Mapping[str, str] | None = None, config_file: str | None = None, require_portal: bool = True
) -> Config:
    """Read the configuration; ``require_portal`` demands a URL and a token."""
    env = os.environ if env is None else env
    raw = _raw_settings(env, config_file)
    values: dict[str, Any] = {}
    for name, parse in _PARSERS.items():
        if name in raw:
            try:
                values[_FIELDS.get(name, name)] = parse(raw[name])
            except ValueError as exc:
                raise ConfigError(f"NODEWARDEN_{name.upper()}={raw[name]!r}: {exc}") from exc
    values["token"] = _token(raw)
    values.setdefault("hostname", socket.gethostname())
    config = Config(**values)
    if require_portal and not config.can_post:
        raise ConfigError("NODEWARDEN_URL and NODEWARDEN_TOKEN (or NODEWARDEN_TOKEN_FILE) are required")
    if config.backoff_min_s > config.backoff_max_s:
        raise ConfigError("NODEWARDEN_BACKOFF_MIN must not exceed NODEWARDEN_BACKOFF_MAX")
    return config
