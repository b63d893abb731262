"""Telemetry services: the only road to issuing and revoking node agent tokens."""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from nodes.choices import EventKind
from nodes.services import Actor, record_event

from .auth import TOKEN_PREFIX, forget_cached_tokens, hash_token
from .models import AgentToken


@transaction.atomic
def issue_agent_token(node_id: int, *, actor: Actor, reason: str = "Agent token issued") -> str:
    """Create a token for the node's agent and return it: the only time it can be read."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    AgentToken.objects.create(
        node_id=node_id,
        key_hash=hash_token(token),
        prefix=token[:12],
        created_by=actor.user,
    )
    record_event(node_id, EventKind.ACTION, actor=actor, reason=reason, details={"agent_token": token[:12]})
    return token


@transaction.atomic
def revoke_agent_tokens(node_id: int, *, actor: Actor, reason: str) -> int:
    """Revoke every live token of the node; returns how many were revoked."""
    revoked = AgentToken.objects.filter(node_id=node_id, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if revoked:
        record_event(node_id, EventKind.ACTION, actor=actor, reason=reason, details={"agent_tokens_revoked": revoked})
    transaction.on_commit(forget_cached_tokens)
    return revoked
