"""``nodewarden-agent join``: trade this node's single-use join token for its agent token.

cloud-init runs it once, at the node's first boot (see the portal's docs/day0.md):

    nodewarden-agent --config /etc/nodewarden-agent/config.json join --url URL --join-token nwj_...

It posts ``{"join_token", "hostname", "facts"}`` to ``POST /api/agent/join/`` and writes
the ``nwa_...`` token it gets back, mode 600 and atomically, to the token file that
``nodewarden-agent run`` reads: ``--token-file``, else the configured ``token_file``
(NODEWARDEN_TOKEN_FILE), else ``<state dir>/token``.

Exit codes: 0 joined; 1 the portal could not be reached (or failed) within ``--wait``
seconds, so trying again may help; 2 usage or configuration error, or the token file
cannot be written; 3 the portal refused the join (unknown, used, expired or revoked
token, wrong host): trying again cannot help, the node must be provisioned again.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .client import Backoff, PortalError, PortalUnavailable, _body
from .config import DEFAULT_STATE_DIR, ConfigError, _raw_settings, _url

JOIN_PATH = "/api/agent/join/"
EXIT_JOINED, EXIT_UNAVAILABLE, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
# 408 and 429 say "not now", not "never": they are retried like a portal that is down.
RETRY_STATUSES = {408, 429}
MAX_MACS = 64


class JoinRefused(PortalError):
    """The portal answered 4xx: this token will never join this node."""


@dataclass(frozen=True)
class JoinSettings:
    """What ``join`` needs, from the command line over the config file and environment."""

    url: str
    join_token: str
    hostname: str
    token_file: Path
    timeout_s: float = 15.0
    wait_s: float = 300.0


def join_settings(args: Any, env: Mapping[str, str] | None = None) -> JoinSettings:
    """Read the settings without ``load_config``: the configured token file does not exist yet."""
    env = os.environ if env is None else env
    raw = _raw_settings(env, args.config)
    url = args.url or raw.get("url", "")
    if not url:
        raise ConfigError("join needs --url (or NODEWARDEN_URL)")
    try:
        url = _url(url)
        timeout = float(raw.get("request_timeout", 15.0))
    except ValueError as exc:
        raise ConfigError(f"{url!r}: {exc}") from exc
    if not args.join_token.strip():
        raise ConfigError("--join-token is empty")
    state_dir = Path(args.state_dir or raw.get("state_dir") or DEFAULT_STATE_DIR)
    token_file = Path(args.token_file or raw.get("token_file") or state_dir / "token")
    return JoinSettings(
        url=url,
        join_token=args.join_token.strip(),
        hostname=raw.get("hostname") or socket.gethostname(),
        token_file=token_file,
        timeout_s=timeout,
        wait_s=max(0.0, args.wait),
    )


def post_join(url: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One POST; raises JoinRefused (4xx) or PortalUnavailable (anything else that is not 2xx)."""
    request = urllib.request.Request(  # noqa: S310 - the portal URL, http(s) only (config._url)
        url + JOIN_PATH,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"nodewarden-agent/{__version__}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the Request above
            body = _body(response.read())
    except urllib.error.HTTPError as exc:
        body = _body(exc.read())
        error_class = JoinRefused if 400 <= exc.code < 500 and exc.code not in RETRY_STATUSES else PortalUnavailable
        raise error_class(_describe(exc.code, body), exc.code, body) from exc
    except (urllib.error.URLError, OSError) as exc:  # refused, DNS, TLS, timeout
        raise PortalUnavailable(f"POST {JOIN_PATH}: {getattr(exc, 'reason', exc)}") from exc
    if not isinstance(body, dict) or not str(body.get("node_token", "")).startswith("nwa_"):
        raise PortalUnavailable(f"POST {JOIN_PATH}: the answer holds no node token: {body!r}"[:500])
    return body


def _describe(status: int, body: Any) -> str:
    if isinstance(body, dict) and "error" in body:
        return f"HTTP {status} {body['error']}: {body.get('detail', '')}"
    return f"HTTP {status}: {body}"


def join_with_retries(
    settings: JoinSettings,
    facts: dict[str, Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Post the join, retrying an unreachable portal until ``wait_s`` has passed (boot races the network)."""
    payload = {"join_token": settings.join_token, "hostname": settings.hostname, "facts": facts}
    backoff = Backoff(minimum=2.0, maximum=30.0)
    deadline = clock() + settings.wait_s
    while True:
        try:
            return post_join(settings.url, payload, settings.timeout_s)
        except PortalUnavailable:
            delay = backoff.failed()
            if clock() + delay > deadline:
                raise
            sleep(delay)


def write_token(path: Path, token: str) -> None:
    """Write the agent token atomically, readable by root only: never a half-written or world-readable file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _check_writable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".check"):
        pass


def collect_facts(
    sys_net: Path = Path("/sys/class/net"),
    os_release: Path = Path("/etc/os-release"),
    boot_id: Path = Path("/proc/sys/kernel/random/boot_id"),
) -> dict[str, Any]:
    """What the portal records about the node at join; whatever cannot be read is left out."""
    facts: dict[str, Any] = {
        "agent_version": __version__,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    try:
        pretty = [
            line.split("=", 1)[1].strip().strip('"')
            for line in os_release.read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        ]
        if pretty:
            facts["os"] = pretty[0]
    except OSError:
        pass
    with contextlib.suppress(OSError):
        facts["boot_id"] = boot_id.read_text().strip()
    macs = {}
    try:
        for device in sorted(sys_net.iterdir())[:MAX_MACS]:
            mac = (device / "address").read_text().strip()
            if device.name != "lo" and mac and mac != "00:00:00:00:00:00":
                macs[device.name] = mac
    except OSError:
        pass
    if macs:
        facts["macs"] = macs
    return facts


def run(args: Any, out: Any, err: Any) -> int:
    """The ``join`` subcommand; returns the exit code (see the module docstring)."""
    try:
        settings = join_settings(args)
    except ConfigError as exc:
        print(f"nodewarden-agent: join: configuration error: {exc}", file=err)
        return EXIT_USAGE
    try:
        _check_writable(settings.token_file)
    except OSError as exc:
        # Before the join: a token consumed whose answer cannot be stored would strand the node.
        print(f"nodewarden-agent: join: cannot write the token file {settings.token_file}: {exc}", file=err)
        return EXIT_USAGE
    try:
        answer = join_with_retries(settings, collect_facts())
    except JoinRefused as exc:
        print(f"nodewarden-agent: join refused: {exc}", file=err)
        return EXIT_REFUSED
    except PortalUnavailable as exc:
        print(f"nodewarden-agent: join: portal unavailable after {settings.wait_s:.0f} s: {exc}", file=err)
        return EXIT_UNAVAILABLE
    try:
        write_token(settings.token_file, answer["node_token"])
    except OSError as exc:
        print(
            f"nodewarden-agent: join: joined, but cannot write the token to {settings.token_file}: {exc}; "
            "an operator must issue a new agent token (manage.py issue_agent_token)",
            file=err,
        )
        return EXIT_USAGE
    print(
        f"joined as {answer.get('hostname')} (node {answer.get('node_id')}); "
        f"agent token written to {settings.token_file}",
        file=out,
    )
    return EXIT_JOINED
