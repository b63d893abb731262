"""Agent configuration: environment variables, optionally a small JSON file underneath.

Every setting is ``NODEWARDEN_<NAME>`` in the environment or ``"<name>"`` in the JSON
file named by ``NODEWARDEN_CONFIG`` (or ``--config``); the environment wins. A malformed
value stops the agent at start with a message naming the setting: an agent that runs
with a silently defaulted interval or state folder is worse than one that refuses.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = "/var/lib/nodewarden-agent"
# A workload name as the portal sends it (checks.specs checks the same pattern).
WORKLOAD_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
WORKLOAD_TIMEOUT_MAX_S = 3600.0  # the portal expires a training-step run after an hour


class ConfigError(ValueError):
    """A setting is missing or malformed."""


@dataclass(frozen=True)
class Workload:
    """A command the training-step check may run: the portal only ever names it.

    The argv lives here, on the node, so a compromised portal can pick among the
    workloads the node's owner configured but never make the agent run anything else."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float = 600.0


# Shipped with the agent: a few dozen steps of a small MLP on synthetic data (PyTorch). Run by
# file path, not "-m": the script next to this agent runs, whatever else is installed.
TINY_TRAIN = Path(__file__).resolve().parent / "checks" / "tiny_train.py"
BUILTIN_WORKLOADS: dict[str, Workload] = {
    "tiny-train": Workload("tiny-train", (sys.executable, str(TINY_TRAIN)), 300.0),
}


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
    workloads: Mapping[str, Workload] = field(default_factory=lambda: dict(BUILTIN_WORKLOADS))

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


def _workload(name: str, entry: Any) -> Workload:
    if not WORKLOAD_NAME.match(name):
        raise ValueError(f"workload name {name!r} must be lower-case letters, digits, '.', '_' or '-'")
    if entry == "builtin":
        if name not in BUILTIN_WORKLOADS:
            raise ValueError(f"{name}: no builtin workload by that name (builtin: {', '.join(BUILTIN_WORKLOADS)})")
        return BUILTIN_WORKLOADS[name]
    if not isinstance(entry, dict) or set(entry) - {"argv", "timeout_s"}:
        raise ValueError(f'{name}: must be "builtin" or {{"argv": [...], "timeout_s": seconds}}')
    argv = entry.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(arg, str) and arg for arg in argv):
        raise ValueError(f"{name}: argv must be a non-empty list of strings")
    # An absolute program: what runs must not depend on the agent's PATH.
    if not os.path.isabs(argv[0]):
        raise ValueError(f"{name}: argv[0] must be an absolute path, got {argv[0]!r}")
    timeout = entry.get("timeout_s", 600)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= WORKLOAD_TIMEOUT_MAX_S:
        raise ValueError(f"{name}: timeout_s must be a number of seconds from 1 to {WORKLOAD_TIMEOUT_MAX_S:.0f}")
    return Workload(name, tuple(argv), float(timeout))


def _workloads(raw: str) -> dict[str, Workload]:
    """``{"name": "builtin" | {"argv": [...], "timeout_s": n}}`` on top of the builtin ones."""
    data = json.loads(raw)  # a ValueError names the setting in load_config
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object of workload name -> entry")
    return {**BUILTIN_WORKLOADS, **{name: _workload(name, entry) for name, entry in data.items()}}


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
    "workloads": _workloads,  # JSON: an object in the file, a JSON string in the environment
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
    # Structured settings travel as JSON text, like their environment variable.
    return {
        key: json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        for key, value in data.items()
        if value is not None
    }


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
