"""Throttling of credential guessing: who the client is, and how many wrong tokens it has sent.

Sign-in through the login form and the admin is django-axes' (docs/security.md); this module
covers the bearer credentials: REST API tokens, node agent tokens, join tokens and the
``/metrics`` token. Every refusal of one of them is counted per client address in Django's
cache (Redis when ``REDIS_URL`` is set, so every gunicorn worker sees the same count); once
a client has failed ``DEFAULT_THROTTLE_RATES["auth_failure"]`` times in the window, it is answered
429 with ``Retry-After`` before its next token is even looked up, so a correct guess cannot get
through a lockout either. Valid credentials are not counted: a busy agent or API script is never
slowed by this.

The client address is the one DRF's throttles use: ``REMOTE_ADDR``, or with
``NODEWARDEN_TRUSTED_PROXIES`` = n > 0 (DRF's ``NUM_PROXIES``) the address the n-th proxy from
the right put in ``X-Forwarded-For``. Axes and the ``/metrics`` scrape networks read the same one.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

SCOPE = "auth_failure"


def client_ip(request: Any) -> str:
    """The client's address, as DRF's throttles see it (never the raw, spoofable X-Forwarded-For).

    Also django-axes' ``AXES_CLIENT_IP_CALLABLE``.
    """
    meta = getattr(request, "META", {})
    remote_addr = meta.get("REMOTE_ADDR") or ""
    xff = meta.get("HTTP_X_FORWARDED_FOR")
    num_proxies = api_settings.NUM_PROXIES or 0
    if num_proxies <= 0 or not xff:
        return remote_addr
    addrs = [a.strip() for a in xff.split(",")]
    return addrs[-min(num_proxies, len(addrs))] or remote_addr


class AuthFailureThrottle(SimpleRateThrottle):
    """Counts a client's wrong credentials; locks it out once it has spent the rate's allowance.

    Unlike DRF's request throttles it is not asked on every request: callers ask ``locked_out``
    before they look a credential up and call ``record_failure`` when it was wrong.
    """

    scope = SCOPE
    # Set by SimpleRateThrottle.__init__ from the rate (None without one, and every use checks
    # the rate first); the stubs leave them out.
    num_requests: int
    duration: int

    def get_rate(self) -> str | None:
        # Read now, not at import (SimpleRateThrottle.THROTTLE_RATES is bound when DRF loads).
        # Rates are "10/min" strings; the stubs type DEFAULT_THROTTLE_RATES as numbers.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)  # type: ignore[return-value]

    def get_ident(self, request: Any) -> str:
        return client_ip(request)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _history_for(self, request: Any) -> list[float]:
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        history = [t for t in self.cache.get(self.key, []) if t > self.now - self.duration]
        self.history = history
        return history

    def locked_out(self, request: Any) -> bool:
        """True when the client has already failed as often as the rate allows."""
        if self.rate is None:
            return False
        return len(self._history_for(request)) >= self.num_requests

    def record_failure(self, request: Any) -> None:
        """Count one wrong credential from this client."""
        if self.rate is None:
            return
        history = self._history_for(request)
        history.insert(0, self.now)
        self.cache.set(self.key, history[: self.num_requests], self.duration)

    def retry_after(self) -> int:
        """Whole seconds until the oldest counted failure leaves the window (after ``locked_out``)."""
        wait = self.wait()
        return max(1, int(wait + 0.999)) if wait is not None else 1


def too_many_failures_response(throttle: AuthFailureThrottle) -> JsonResponse:
    """The 429 the plain (non-DRF) token endpoints answer a locked-out client with."""
    wait = throttle.retry_after()
    from .api import error_body

    response = JsonResponse(
        error_body(
            f"Too many wrong credentials from this address; try again in {wait} s.",
            "throttled",
            error="too many failed attempts",
        ),
        status=429,
    )
    response["Retry-After"] = str(wait)
    return response


def refuse_if_locked_out(request: HttpRequest | Any) -> AuthFailureThrottle:
    """For DRF authentication classes: raise 429 (Throttled) when the client is locked out."""
    throttle = AuthFailureThrottle()
    if throttle.locked_out(request):
        raise exceptions.Throttled(wait=throttle.retry_after(), detail="Too many wrong credentials from this address.")
    return throttle


class ThrottledTokenAuthentication(TokenAuthentication):
    """DRF's ``Authorization: Token <key>``, with wrong keys counted and guessing locked out."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith(self.keyword.lower() + " "):
            return None  # no token offered: nothing to count
        throttle = refuse_if_locked_out(request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure(request)
            raise
