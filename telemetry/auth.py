"""How a node agent proves which node it is: a bearer token bound to one node.

Tokens look like ``nwa_<43 url-safe characters>``; only their SHA-256 is stored. The
lookup is cached in-process because ingest is the hottest path in the portal (one fleet
of 90,000 nodes at 30 s is 3,000 reports a second). Revocation is honoured in every
process within ``GENERATION_CHECK_SECONDS``: revoking bumps a generation counter in the
shared cache, and each process reads it at most once per that interval (one cache round
trip a second, not one per request), dropping its cached tokens when it moved. Should the
shared cache be unreachable, a cached token still expires after ``CACHE_SECONDS``.

A process learns every live token in one query (``_load_all``: at its first cache miss, then again
once ``CACHE_SECONDS`` have passed or the generation moved), not one query per token: after a
restart or deploy every agent of the fleet reports within 30 s, and a per-token lookup (a query,
a lockout read, a ``last_used`` write, each a round trip) cost the web process several times what
the report's own ingest costs. A token issued after the load still misses and is looked up alone.
A loaded token's first use in the process still asks the client's lockout (one cache read per
token), as a lookup does: a right guess after too many wrong ones gets a 429. A token that has
passed here once is not asked again when a revocation elsewhere drops the cache.
``last_used`` is written for the tokens seen lately in one UPDATE at most once a second
(``_flush_last_used``), never on a request's own round trip.

Wrong tokens are counted per client address (``nodewarden.throttling``): a client that has sent
too many is answered 429 before its next token is looked up. A token found valid in the
in-process cache skips that count entirely, so the hot path costs no round trip to the cache.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from nodewarden.throttling import AuthFailureThrottle

log = logging.getLogger(__name__)

TOKEN_PREFIX = "nwa_"  # noqa: S105 - the public prefix of every agent token
# Longer than the agents' 30 s interval, or nearly every report would miss; revocation waits this long.
CACHE_SECONDS = 120.0
GENERATION_CHECK_SECONDS = 1.0
GENERATION_KEY = "telemetry:agent-token-generation"
# last_used is a convenience for operators, not an audit trail: one write per token per 5 min.
LAST_USED_EVERY_SECONDS = 300.0

# Bound on the one query that loads every live token (a fleet is 100,000 nodes): past it, the
# rest are looked up one by one on their first request, as a token issued after the load is.
LOAD_ALL_MAX = 200_000
CACHE_MAX = LOAD_ALL_MAX + 50_000  # and room for the tokens looked up alone (bogus ones too) before a clear
LAST_USED_FLUSH_SECONDS = 1.0

_cache: dict[str, tuple[float, AgentIdentity | None]] = {}
_generation: list[Any] = [0.0, None]  # [when last read (monotonic), the shared generation then]
_loaded: list[float] = [float("-inf")]  # when _load_all last ran (monotonic); -inf: not since the last clear
# Token id -> its last_used as loaded (None: never), for loaded tokens not yet used here: their
# first use is checked against the client's lockout, as a lookup is (a right guess gets nowhere).
_first_use: dict[int, Any] = {}
# Token ids this process has seen pass the lockout (a lookup or a first use): kept when a revocation
# elsewhere drops the cache, so a reload does not ask their lockout again (the revoked are not reloaded).
_vouched: set[int] = set()
_touched: set[int] = set()  # token ids seen since the last flush whose last_used is due
_flushed: list[float] = [0.0]
_lock = threading.Lock()  # _load_all and _flush_last_used: one thread of the process at a time


class AgentAuthError(Exception):
    """The request carries no valid agent token. ``status`` is 401."""

    status = 401


class AgentThrottled(AgentAuthError):
    """Too many wrong tokens from this client address lately; ``retry_after`` in seconds."""

    status = 429

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"Too many wrong node agent tokens from this address; try again in {retry_after} s.")
        self.retry_after = retry_after


@dataclass(frozen=True)
class AgentIdentity:
    """The node an authenticated agent speaks for. Quacks enough like a user for DRF."""

    node_id: int
    hostname: str
    token_id: int
    is_authenticated: bool = True
    is_node_agent: bool = True  # nodes.permissions.IsNodeAgent lets it (and only it) in
    is_staff: bool = False
    is_superuser: bool = False
    is_active: bool = True

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _lookup(key_hash: str) -> AgentIdentity | None:
    from .models import AgentToken

    row = (
        AgentToken.objects.filter(key_hash=key_hash, revoked_at__isnull=True)
        .values("id", "node_id", "node__hostname", "last_used")
        .first()
    )
    if row is None:
        return None
    now = timezone.now()
    if row["last_used"] is None or (now - row["last_used"]).total_seconds() > LAST_USED_EVERY_SECONDS:
        AgentToken.objects.filter(pk=row["id"]).update(last_used=now)
    return AgentIdentity(node_id=row["node_id"], hostname=row["node__hostname"], token_id=row["id"])


def identify_agent(authorization_header: str | None, request: Any) -> AgentIdentity:
    """Resolve an ``Authorization: Bearer nwa_...`` header to its node, or raise AgentAuthError.

    ``request`` names the client whose wrong tokens are counted (AgentThrottled once too many).
    """
    if not authorization_header:
        raise AgentAuthError("Missing Authorization header: send 'Authorization: Bearer <node agent token>'.")
    scheme, _, token = authorization_header.partition(" ")
    token = token.strip()
    key_hash = hash_token(token)
    now = time.monotonic()
    _follow_revocations(now)
    cached = _cache.get(key_hash)
    if (cached is None or cached[0] <= now) and now - _loaded[0] >= CACHE_SECONDS:
        _load_all(now)
        cached = _cache.get(key_hash)
    if cached is not None and cached[0] > now and cached[1] is not None:
        known = cached[1]
        if known.token_id in _first_use:  # loaded, not yet used here since: as a lookup would be
            _first_use_of_loaded(known, request, now)
        elif _touched and now - _flushed[0] >= LAST_USED_FLUSH_SECONDS:
            _flush_last_used(now)
        return known  # a known good token: the hot path, nothing to count
    throttle = AuthFailureThrottle()
    if throttle.locked_out(request):
        raise AgentThrottled(throttle.retry_after())
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX):
        throttle.record_failure(request)
        raise AgentAuthError("Authorization must be 'Bearer nwa_...', a node agent token.")
    if cached is not None and cached[0] > now:
        identity = cached[1]
    else:
        identity = _lookup(key_hash)
        if len(_cache) > CACHE_MAX:  # bounded: a flood of bogus tokens cannot grow it forever
            _cache.clear()
        _cache[key_hash] = (now + CACHE_SECONDS, identity)
    if identity is None:
        throttle.record_failure(request)
        raise AgentAuthError("Unknown or revoked node agent token.")
    _vouch(identity.token_id)
    return identity


def _vouch(token_id: int) -> None:
    if len(_vouched) > CACHE_MAX:  # bounded, as the cache is
        _vouched.clear()
    _vouched.add(token_id)


def _follow_revocations(now: float) -> None:
    """Drop the cached tokens when another process revoked one (at most one read per interval)."""
    if now - _generation[0] < GENERATION_CHECK_SECONDS:
        return
    _generation[0] = now
    try:
        current = cache.get(GENERATION_KEY)
    except Exception:  # the shared cache is down: CACHE_SECONDS still bounds a revoked token
        log.warning("could not read the agent token generation", exc_info=True)
        return
    if current != _generation[1]:
        _forget_here()
        _generation[1] = current


def _forget_here() -> None:
    _cache.clear()
    _first_use.clear()
    _loaded[0] = float("-inf")  # the next miss loads every live token again, the revoked ones left out


def _load_all(now: float) -> None:
    """Cache every live token (up to LOAD_ALL_MAX) from one query; tokens issued later miss and
    are looked up alone (``_lookup``)."""
    from .models import AgentToken

    with _lock:
        if now - _loaded[0] < CACHE_SECONDS:  # another thread just did
            return
        rows = AgentToken.objects.filter(revoked_at__isnull=True).values_list(
            "key_hash", "id", "node_id", "node__hostname", "last_used"
        )[:LOAD_ALL_MAX]
        _cache.clear()
        _first_use.clear()
        expires = now + CACHE_SECONDS
        for key_hash, token_id, node_id, hostname, last_used in rows:
            _cache[key_hash] = (expires, AgentIdentity(node_id=node_id, hostname=hostname, token_id=token_id))
            _first_use[token_id] = last_used
        _loaded[0] = now


def _first_use_of_loaded(identity: AgentIdentity, request: Any, now: float) -> None:
    """A loaded token's first use here: the client's lockout is asked (one cache read, once per
    token and load, not per request), and its last_used is queued for the next flush if due."""
    if identity.token_id not in _vouched:
        throttle = AuthFailureThrottle()
        if throttle.locked_out(request):
            raise AgentThrottled(throttle.retry_after())
        _vouch(identity.token_id)
    last_used = _first_use.pop(identity.token_id, None)
    if last_used is None or (timezone.now() - last_used).total_seconds() > LAST_USED_EVERY_SECONDS:
        _touched.add(identity.token_id)
    if now - _flushed[0] >= LAST_USED_FLUSH_SECONDS:
        _flush_last_used(now)


def _flush_last_used(now: float) -> None:
    """One UPDATE for every token seen since the last flush whose last_used was due."""
    from .models import AgentToken

    with _lock:
        if now - _flushed[0] < LAST_USED_FLUSH_SECONDS or not _touched:
            return
        _flushed[0] = now
        ids = list(_touched)[:10_000]
        _touched.difference_update(ids)
    try:
        AgentToken.objects.filter(pk__in=ids).update(last_used=timezone.now())
    except Exception:  # a convenience for operators: never fail a report for it
        log.warning("could not write last_used of %d agent tokens", len(ids), exc_info=True)


def forget_cached_tokens() -> None:
    """Drop the cached tokens here, and (through the shared generation) in every other process."""
    _forget_here()
    _vouched.clear()
    try:
        cache.incr(GENERATION_KEY)
    except ValueError:  # no generation yet (or the cache was flushed)
        cache.add(GENERATION_KEY, 1, timeout=None)
    except Exception:
        log.warning("could not bump the agent token generation", exc_info=True)


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication for the agent endpoints: ``request.user`` becomes an AgentIdentity."""

    def authenticate(self, request: Any) -> tuple[AgentIdentity, None] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header or not header.lower().startswith("bearer "):
            return None
        try:
            return identify_agent(header, request), None
        except AgentThrottled as exc:
            raise exceptions.Throttled(wait=exc.retry_after, detail=str(exc)) from exc
        except AgentAuthError as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc

    def authenticate_header(self, request: Any) -> str:
        return "Bearer"


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """Describes the agent bearer token in the OpenAPI schema (registered on import)."""

    target_class = "telemetry.auth.AgentTokenAuthentication"
    name = "nodeAgentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "nwa_... node agent token"}
