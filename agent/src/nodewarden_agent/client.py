"""HTTP to the portal with the standard library only (urllib), plus the backoff policy.

Outcomes are exceptions the agent loop can act on without reading status codes:
``PortalRejected`` (400/413/422: this request is malformed, never retry it as is),
``PortalAuthError`` (401/403: token problem, keep the data and back off) and
``PortalUnavailable`` (5xx, 429, other statuses, timeouts, refused connections).
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from . import __version__

REJECT_STATUSES = {400, 413, 422}


class PortalError(Exception):
    """Base: the portal did not accept the request."""

    def __init__(self, message: str, status: int | None = None, body: Any = None, retry_after: float = 0.0):
        super().__init__(message)
        self.status, self.body = status, body
        self.retry_after = retry_after  # seconds the portal asked us to wait (Retry-After), 0 if it did not


class PortalRejected(PortalError):
    """The portal refused the content; retrying the same body cannot succeed."""


class PortalAuthError(PortalError):
    """The token was refused (revoked, or issued for another node)."""


class PortalUnavailable(PortalError):
    """The portal could not be reached or failed; try again later."""


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode() or "null")
    except ValueError:
        return raw.decode(errors="replace")[:2000]


class PortalClient:
    """Talks to one portal with one agent token."""

    def __init__(self, base_url: str, token: str, timeout: float = 15.0):
        self.base_url, self.timeout = base_url.rstrip("/"), timeout
        self._token = token

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        request = urllib.request.Request(  # noqa: S310 - the portal URL, http(s) only (config._url)
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"nodewarden-agent/{__version__}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the Request above
                return _body(response.read())
        except urllib.error.HTTPError as exc:
            error = self._error(exc.code, _body(exc.read()))
            error.retry_after = retry_after_seconds(exc.headers.get("Retry-After"))
            raise error from exc
        except (urllib.error.URLError, OSError) as exc:  # refused, DNS, TLS, timeout
            raise PortalUnavailable(f"{method} {path}: {getattr(exc, 'reason', exc)}") from exc

    @staticmethod
    def _error(status: int, body: Any) -> PortalError:
        text = f"HTTP {status}: {body}"
        if status in REJECT_STATUSES:
            return PortalRejected(text, status, body)
        if status in (401, 403):
            return PortalAuthError(text, status, body)
        return PortalUnavailable(text, status, body)

    def post_reports(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """POST /api/agent/reports/ -> {"accepted": n, "duplicates": m}."""
        return self._request("POST", "/api/agent/reports/", {"reports": reports}) or {}

    def fetch_checks(self) -> dict[str, Any]:
        """GET /api/agent/checks/ -> {"idle": bool, "checks": [...]}."""
        return self._request("GET", "/api/agent/checks/") or {}

    def check_state(self, check_id: int) -> dict[str, Any]:
        """GET /api/agent/checks/<id>/ -> {"wanted": bool, "status": ..., "reason": ...}."""
        return self._request("GET", f"/api/agent/checks/{int(check_id)}/") or {}

    def post_check_result(self, check_id: int, result: dict[str, Any]) -> Any:
        return self._request("POST", f"/api/agent/checks/{int(check_id)}/result/", result)

    def agent_state(self) -> Any:
        """GET /api/agent/state/ -> {"state", "in_production", "reason"}."""
        return self._request("GET", "/api/agent/state/") or {}

    def fetch_commands(self) -> dict[str, Any]:
        """GET /api/agent/commands/ -> {"commands": [{"id", "verb", "args", "expires_at"}, ...]}."""
        return self._request("GET", "/api/agent/commands/") or {}

    def post_command_result(self, command_id: int, result: dict[str, Any]) -> Any:
        return self._request("POST", f"/api/agent/commands/{int(command_id)}/result/", result)


def retry_after_seconds(value: str | None) -> float:
    """A Retry-After header in seconds (the portal sends delta-seconds); 0 for none or a date,
    capped at an hour so a broken proxy cannot silence the agent for days."""
    try:
        return min(3600.0, max(0.0, float(value or 0)))
    except ValueError:
        return 0.0


class Backoff:
    """Exponential backoff with full jitter, capped: 5 s, 10 s, 20 s ... 5 min.

    Jitter spreads a fleet's retries after a portal outage so thousands of agents do
    not come back in the same second."""

    def __init__(
        self,
        minimum: float = 5.0,
        maximum: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ):
        self.minimum, self.maximum = minimum, maximum
        self.clock = clock
        self.rand = rand
        self.failures = 0
        self.not_before = 0.0

    def ready(self) -> bool:
        return self.clock() >= self.not_before

    def failed(self, at_least: float = 0.0) -> float:
        """Record a failure; returns the delay before the next attempt (never under ``at_least``,
        the portal's Retry-After)."""
        self.failures += 1
        ceiling = min(self.maximum, self.minimum * 2 ** (self.failures - 1))
        delay = max(at_least, self.minimum + (ceiling - self.minimum) * self.rand())
        self.not_before = self.clock() + delay
        return delay

    def succeeded(self) -> None:
        self.failures, self.not_before = 0, 0.0
