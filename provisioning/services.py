"""Day 0 verbs: prepare a node's boot, let its agent join, revoke a join token.

The road is ``prepare_boot`` (operator: boot config, a fresh single-use join token,
ENROLLED -> INITIALIZING), then the node boots with ``ds=nocloud;s=<seed URL>``,
cloud-init runs ``nodewarden-agent join`` and ``join`` consumes the token, issues the
agent's long-lived token and moves the node INITIALIZING -> ONBOARD. Each verb runs in
one transaction with its history rows; state changes go through ``nodes.services``.

A reimage (the remediation ladder's rung) takes the same road without leaving
REMEDIATING: ``prepare_reimage`` issues a new boot generation (so a new cloud-init
instance-id: cloud-init runs its first-boot modules again on the reinstalled disk) and a
new join token, living only as long as the reimage step; the reinstalled node's ``join``
replaces the agent's token and completes the step, whose success check is exactly that
the node came back and joined (the owner registered in ``provisioning.rejoin`` completes it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from fleet.choices import SchedulerKind
from nodes import services as lifecycle
from nodes.choices import EventKind, NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor, clean_reason, record_event
from nodewarden.errors import TransitionForbidden
from telemetry.services import issue_agent_token, revoke_agent_tokens

from .models import BootConfig, JoinToken
from .rejoin import awaited_rejoin
from .tokens import JOIN_TOKEN_PREFIX, hash_token, join_token_for, new_kubeadm_token_id, new_salt

ACTOR = Actor.system("provisioning")
PROVISIONABLE = (NodeState.ENROLLED, NodeState.INITIALIZING)
# BootConfig fields an operator may set through prepare_boot (the API's optional body).
BOOT_FIELDS = (
    "boot_image",
    "boot_image_url",
    "kernel_cmdline_extra",
    "interface_mac",
    "ip_address",
    "prefix_length",
    "gateway",
    "dns_servers",
    "mtu",
    "vlan_id",
)
# What an agent may tell about itself at join; kept in the history row, so it is bounded.
MAX_FACTS_BYTES = 8192


def join_token_ttl() -> timedelta:
    """NODEWARDEN_JOIN_TOKEN_TTL seconds (settings.py checks it is positive)."""
    value = settings.NODEWARDEN_JOIN_TOKEN_TTL
    ttl = timedelta(seconds=float(value))
    if ttl <= timedelta(0):
        raise ValueError(f"NODEWARDEN_JOIN_TOKEN_TTL must be positive, not {value!r}")
    return ttl


# --- prepare_boot -----------------------------------------------------------------
def prepare_boot(
    node_id: int, *, actor: Actor, reason: str, boot_config: Mapping[str, Any] | None = None
) -> tuple[BootConfig, str]:
    """Get a node ready to boot for Day 0 and return its boot config and a fresh join token.

    Creates the BootConfig if needed (applying ``boot_config`` fields, validated),
    bumps its generation, revokes the node's unused join tokens, issues a new one
    (returned in clear: the caller's only copy outside the user-data) and moves the
    node ENROLLED -> INITIALIZING. A node already INITIALIZING is re-provisioned:
    new token, no transition. Raises ``Node.DoesNotExist``, ``ReasonRequired``,
    ``TransitionForbidden``, ``TransitionNotAllowed`` (any other state) or
    ``ValidationError`` (bad boot config fields, each named); nothing is written then.
    """
    reason = clean_reason(reason)
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise TransitionForbidden(f"{actor.name} may not provision nodes.")
    unknown = set(boot_config or {}) - set(BOOT_FIELDS)
    if unknown:
        raise ValidationError(dict.fromkeys(sorted(unknown), "Not a boot config field."))
    with transaction.atomic():
        # Serialises concurrent provisions of one node (one BootConfig, one live token); "of": the cluster
        # is an outer join, which PostgreSQL cannot lock.
        node = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node_id)
        if node.state not in PROVISIONABLE:
            raise TransitionNotAllowed(
                f"Cannot provision a node in state {node.get_state_display()!r}: only "
                "enrolled or initializing nodes boot for Day 0."
            )
        boot = _updated_boot_config(node, boot_config or {})
        revoked = _revoke_unused(node.pk)
        token, clear = _issue_join_token(node, boot.generation, actor)
        details = {
            "boot_generation": boot.generation,
            "join_token": token.prefix,
            "join_token_expires_at": token.expires_at.isoformat(),
            "join_tokens_revoked": revoked,
        }
        if token.kubeadm_token_id:
            details["kubeadm_token_id"] = token.kubeadm_token_id
        if node.state == NodeState.ENROLLED:
            lifecycle.start_initialization(node.pk, actor=actor, reason=reason, details=details)
        else:
            record_event(node.pk, EventKind.ACTION, actor=actor, reason=f"Re-provisioned: {reason}", details=details)
    return boot, clear


def prepare_reimage(
    node_id: int, *, actor: Actor, reason: str, expires_at: datetime | None = None
) -> tuple[BootConfig, JoinToken]:
    """Get a remediating node ready to be reinstalled: a new boot generation and join token.

    Bumps the node's boot config generation (a new cloud-init instance-id), revokes its
    unused join tokens and issues a new one for the new generation, expiring at
    ``expires_at`` (the reimage step's deadline: a token is no use once the step has
    failed) or after the usual TTL, whichever is sooner. The node stays REMEDIATING; its
    ``join`` then completes the running reimage step. A node without a boot config gets
    one (defaults: DHCP). Raises ``TransitionNotAllowed`` unless the node is REMEDIATING.
    """
    reason = clean_reason(reason)
    with transaction.atomic():
        node = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node_id)
        if node.state != NodeState.REMEDIATING:
            raise TransitionNotAllowed(
                f"Cannot reimage a node in state {node.get_state_display()!r}: only a node "
                "under remediation is reimaged (Day 0 uses prepare_boot)."
            )
        boot = _updated_boot_config(node, {})
        revoked = _revoke_unused(node.pk)
        token, _ = _issue_join_token(node, boot.generation, actor)
        if expires_at is not None and expires_at < token.expires_at:
            token.expires_at = expires_at
            token.save(update_fields=["expires_at"])
        record_event(
            node.pk,
            EventKind.ACTION,
            actor=actor,
            reason=f"Reimage prepared: {reason}",
            details={
                "boot_generation": boot.generation,
                "join_token": token.prefix,
                "join_token_expires_at": token.expires_at.isoformat(),
                "join_tokens_revoked": revoked,
            },
        )
    return boot, token


def _updated_boot_config(node: Node, changes: Mapping[str, Any]) -> BootConfig:
    boot = BootConfig.objects.filter(node=node).first() or BootConfig(node=node)
    for name, value in changes.items():
        setattr(boot, name, value)
    boot.generation += 1
    boot.full_clean(exclude=["node"])
    boot.save()
    return boot


def _revoke_unused(node_id: int) -> int:
    return JoinToken.objects.filter(node_id=node_id, used_at__isnull=True, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


def _issue_join_token(node: Node, generation: int, actor: Actor) -> tuple[JoinToken, str]:
    salt = new_salt()
    clear = join_token_for(salt)
    token = JoinToken(
        node=node,
        generation=generation,
        key_hash=hash_token(clear),
        salt=salt,
        prefix=clear[:12],
        expires_at=timezone.now() + join_token_ttl(),
        created_by=actor.user,
    )
    if node.cluster is not None and node.cluster.scheduler_kind == SchedulerKind.KUBERNETES:
        token.kubeadm_token_id = new_kubeadm_token_id()
        token.kubeadm_secret_hash = hash_token(token.kubeadm_token())
    token.save()
    return token, clear


# --- join -------------------------------------------------------------------------
class JoinRefused(Exception):
    """The agent may not join; ``status`` and ``error`` are what the API answers."""

    status = 400
    error = "invalid join"


class UnknownJoinToken(JoinRefused):
    status, error = 401, "unknown join token"


class WrongHostname(JoinRefused):
    status, error = 403, "wrong node"


class JoinTokenUsed(JoinRefused):
    status, error = 409, "join token already used"


class NodeNotJoinable(JoinRefused):
    status, error = 409, "node not initializing"


class JoinTokenExpired(JoinRefused):
    status, error = 410, "join token expired"


class JoinTokenRevoked(JoinRefused):
    status, error = 410, "join token revoked"


@dataclass(frozen=True)
class JoinResult:
    """What the agent gets back: which node it is, and its long-lived token (shown only here)."""

    node_id: int
    hostname: str
    agent_token: str


def join(join_token: str, *, hostname: str, agent_facts: dict[str, Any]) -> JoinResult:
    """Let a booted node's agent join: consume its join token, issue its agent token, mark it onboard
    (Day 0), or, for a node reinstalled by a reimage, complete that reimage (``_rejoin_after_reimage``).

    The token is consumed by a compare-and-swap ``UPDATE ... WHERE used_at IS NULL AND
    revoked_at IS NULL AND expires_at > now``: of two joins racing with one token,
    exactly one changes the row and goes on; the other is refused as "already used".
    A refused join writes nothing (and a wrong hostname does not use the token up).
    Raises a ``JoinRefused`` subclass, or ``ValidationError`` for bad facts.
    """
    facts = _clean_facts(agent_facts)
    hostname = (hostname or "").strip().rstrip(".")
    if not join_token.startswith(JOIN_TOKEN_PREFIX):
        raise UnknownJoinToken("A join token starts with 'nwj_'; this is not one.")
    token = JoinToken.objects.select_related("node").filter(key_hash=hash_token(join_token)).first()
    if token is None:
        raise UnknownJoinToken("Unknown join token: it was never issued, or its node was deleted.")
    node = token.node
    if hostname.lower() != node.hostname.lower():
        raise WrongHostname(f"This join token belongs to {node.hostname!r}, not {hostname!r}.")
    with transaction.atomic():
        now = timezone.now()
        consumed = JoinToken.objects.filter(
            pk=token.pk, used_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now
        ).update(used_at=now)
        if not consumed:
            token.refresh_from_db()
            raise _refusal(token, now)
        node.refresh_from_db(fields=["state"])
        if node.state == NodeState.REMEDIATING:
            agent_token = _rejoin_after_reimage(node, token, hostname, facts)
        elif node.state != NodeState.INITIALIZING:
            # Rolls the consumption back with the rest: the token stays usable once the node is ready.
            raise NodeNotJoinable(
                f"{node.hostname} is {node.get_state_display()!r}, not 'Initializing': "
                "an operator must provision it first."
            )
        else:
            agent_token = issue_agent_token(
                node.pk, actor=ACTOR, reason=f"Agent token issued at join ({token.prefix}…)"
            )
            lifecycle.mark_onboard(
                node.pk,
                actor=ACTOR,
                reason="The node booted and its agent joined.",
                details={
                    "join_token": token.prefix,
                    "agent_token": agent_token[:12],
                    "hostname": hostname,
                    "facts": facts,
                },
            )
    return JoinResult(node_id=node.pk, hostname=node.hostname, agent_token=agent_token)


def _rejoin_after_reimage(node: Node, token: JoinToken, hostname: str, facts: dict[str, Any]) -> str:
    """A remediating node joins only as the end of its running reimage: the token must be the one
    that reimage issued (its boot generation, issued once the step started). The reinstalled disk
    has no agent token any more: the old ones are revoked and a new one issued, and the reimage
    step passes (its success check is this join). Raises ``NodeNotJoinable`` otherwise (the
    caller's transaction rolls the token's consumption back)."""
    awaited = awaited_rejoin(node.pk)  # remediation's running reimage rung (provisioning.rejoin)
    current = BootConfig.objects.filter(node_id=node.pk).values_list("generation", flat=True).first()
    if awaited is None:
        raise NodeNotJoinable(
            f"{node.hostname} is {node.get_state_display()!r} with no reimage waiting for it to "
            "rejoin: only a reinstalled node joins during a remediation."
        )
    if token.generation != current or token.created < awaited.started:
        raise NodeNotJoinable(
            f"Join token {token.prefix}… was not issued for the running reimage of "
            f"{node.hostname} (boot generation {token.generation}, current {current})."
        )
    revoke_agent_tokens(node.pk, actor=ACTOR, reason="Reimaged: the reinstalled node's agent joins with a new token")
    agent_token = issue_agent_token(
        node.pk, actor=ACTOR, reason=f"Agent token issued at the rejoin after a reimage ({token.prefix}…)"
    )
    record_event(
        node.pk,
        EventKind.ACTION,
        actor=ACTOR,
        reason="The reimaged node booted and its agent rejoined.",
        details={
            "join_token": token.prefix,
            "agent_token": agent_token[:12],
            "hostname": hostname,
            "boot_generation": token.generation,
            **awaited.details,
            "facts": facts,
        },
    )
    if not awaited.complete(
        f"the reinstalled node (boot generation {token.generation}) rejoined with join token {token.prefix}…"
    ):
        raise NodeNotJoinable(f"The reimage of {node.hostname} ended before its agent rejoined.")
    return agent_token


def _refusal(token: JoinToken, now: datetime) -> JoinRefused:
    if token.revoked_at is not None:
        return JoinTokenRevoked(
            f"Join token {token.prefix}… was revoked at {token.revoked_at.isoformat()}; "
            "ask an operator to provision the node again."
        )
    if token.used_at is not None:
        return JoinTokenUsed(
            f"Join token {token.prefix}… was already used at {token.used_at.isoformat()}; a join token works once."
        )
    return JoinTokenExpired(
        f"Join token {token.prefix}… expired at {token.expires_at.isoformat()}; "
        "ask an operator to provision the node again."
    )


def _clean_facts(facts: Any) -> dict[str, Any]:
    if facts is None:
        return {}
    if not isinstance(facts, dict):
        raise ValidationError({"facts": "Must be a JSON object."})
    if len(json.dumps(facts, default=str)) > MAX_FACTS_BYTES:
        raise ValidationError({"facts": f"At most {MAX_FACTS_BYTES} bytes of JSON."})
    return facts


# --- revoke -----------------------------------------------------------------------
def revoke_join_token(token_id: int, *, actor: Actor, reason: str) -> bool:
    """Revoke one join token if it is still unused; returns whether it was revoked.

    A compare-and-swap like ``join``: a token used or revoked meanwhile is left alone.
    """
    reason = clean_reason(reason)
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise TransitionForbidden(f"{actor.name} may not revoke join tokens.")
    with transaction.atomic():
        token = JoinToken.objects.get(pk=token_id)
        revoked = JoinToken.objects.filter(pk=token_id, used_at__isnull=True, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if revoked:
            record_event(
                token.node_id,
                EventKind.ACTION,
                actor=actor,
                reason=reason,
                details={"join_token_revoked": token.prefix},
            )
    return bool(revoked)
