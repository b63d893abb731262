"""The agent command channel: the only road to issuing, delivering, finishing and expiring commands.

A command asks a node's agent to do one of a fixed set of things (``CommandVerb``) with typed
arguments checked here (``clean_args``). The agent has no inbound port: it polls, and its poll
takes the node's queued, unexpired commands (``deliver_commands``, at most once: a reboot or a
GPU reset is never handed out twice), runs them and posts each outcome (``record_command_result``,
idempotent by command id). A queued command past ``expires_at`` is never delivered, and a
delivered one the agent never answers (it died mid-reset) fails as unanswered at ``answer_by``,
its ttl again counted from delivery (``expire_commands``, at claim time and from the beat): no
command waits forever. Issue, outcome and expiry are NodeEvents, with actor and reason, in the
same transaction as the change.

Telemetry owns the agent's connection, so checks, health and remediation can all issue commands.
Who waits for a command's end registers in ``on_result`` (remediation's GPU reset rung does, in its
``AppConfig.ready``): telemetry sits below them and never imports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from nodes.choices import EventKind
from nodes.models import Node
from nodes.services import Actor, clean_reason, record_event

from .choices import COMMAND_OUTCOMES, DIAGNOSTIC_PARTS, FINISHED_COMMAND_STATUSES, CommandStatus, CommandVerb
from .models import AgentCommand
from .schema import MAX_GPUS

DEFAULT_TTL = timedelta(minutes=15)
MIN_TTL, MAX_TTL = timedelta(minutes=1), timedelta(days=1)
# The agent's result (a diagnostics bundle is the big one), as JSON; the agent bounds each part to 64 KiB.
COMMAND_RESULT_MAX_BYTES = 512 * 1024
# Commands one poll may take; more wait for the next poll.
DELIVER_BATCH = 10
EXPIRE_BATCH = 500


ResultHandler = Callable[[int], None]
ON_RESULT: list[ResultHandler] = []


def on_result(fn: ResultHandler) -> ResultHandler:
    """Register ``fn(command_id)``, run after the commit of every command's end: the agent's result,
    an expiry undelivered, or a failure unanswered. The handler reads the command and decides."""
    ON_RESULT.append(fn)
    return fn


def _queue_result_followups(command_id: int) -> None:
    """Queue the registered handlers to run once the current transaction commits."""
    for handler in ON_RESULT:
        transaction.on_commit(partial(handler, command_id))


class CommandConflict(Exception):
    """The result contradicts the command's state (never delivered): the API answers 409."""


def _int_arg(args: dict[str, Any], name: str, low: int, high: int) -> int:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError({"args": [f"{name} must be an integer from {low} to {high}."]})
    return value


def clean_args(verb: str, args: Any) -> dict[str, Any]:
    """The verb's arguments, checked and normalised; ValidationError (a 400) names what is wrong.

    reset_gpu: {"gpu": index}; reboot: {}; collect_diagnostics: {"collect": [parts]} (default all
    of DIAGNOSTIC_PARTS). Unknown verbs and unknown argument names are refused."""
    if verb not in CommandVerb.values:
        raise ValidationError({"verb": [f"Must be one of {', '.join(CommandVerb.values)}."]})
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise ValidationError({"args": ["Must be an object."]})
    allowed = {CommandVerb.RESET_GPU: {"gpu"}, CommandVerb.REBOOT: set(), CommandVerb.COLLECT_DIAGNOSTICS: {"collect"}}
    unknown = sorted(set(args) - allowed[CommandVerb(verb)])
    if unknown:
        raise ValidationError({"args": [f"{verb} takes no argument {', '.join(map(repr, unknown))}."]})
    if verb == CommandVerb.RESET_GPU:
        return {"gpu": _int_arg(args, "gpu", 0, MAX_GPUS - 1)}
    if verb == CommandVerb.COLLECT_DIAGNOSTICS:
        parts = args.get("collect", list(DIAGNOSTIC_PARTS))
        if not isinstance(parts, list) or not parts or not all(p in DIAGNOSTIC_PARTS for p in parts):
            raise ValidationError({"args": [f"collect must be a non-empty list of {', '.join(DIAGNOSTIC_PARTS)}."]})
        return {"collect": [p for p in DIAGNOSTIC_PARTS if p in parts]}  # fixed order, no repeats
    return {}


def describe(command: AgentCommand) -> str:
    """One line for history rows: "reset_gpu (gpu 3) #12"."""
    args = ", ".join(f"{k} {v if not isinstance(v, list) else '+'.join(v)}" for k, v in command.args.items())
    return f"{command.verb}{f' ({args})' if args else ''} #{command.pk}"


def issue_command(
    node_id: int, verb: str, *, args: Any = None, actor: Actor, reason: str, ttl: timedelta = DEFAULT_TTL
) -> AgentCommand:
    """Queue a command for the node's agent; it expires undelivered after ``ttl``.

    ValidationError for a bad verb, arguments or ttl; ReasonRequired without a reason;
    Node.DoesNotExist for an unknown node."""
    reason = clean_reason(reason)
    args = clean_args(verb, args)
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise ValidationError({"ttl_s": [f"Must be from {MIN_TTL.seconds} to {int(MAX_TTL.total_seconds())} seconds."]})
    now = timezone.now()
    with transaction.atomic():
        node = Node.objects.only("id").get(pk=node_id)
        command = AgentCommand.objects.create(
            node=node,
            verb=verb,
            args=args,
            issued_by=actor.user,
            issued_by_name=actor.name,
            reason=reason,
            created=now,
            expires_at=now + ttl,
        )
        record_event(
            node_id,
            EventKind.ACTION,
            actor=actor,
            reason=f"Agent command {describe(command)} issued: {reason}",
            details={
                "agent_command": command.pk,
                "verb": verb,
                "args": args,
                "expires_at": command.expires_at.isoformat(),
            },
        )
    return command


def deliver_commands(node_id: int, now: datetime | None = None) -> list[AgentCommand]:
    """The agent's poll: expire the node's stale queued commands, then take the rest (oldest first).

    Each is taken with a compare-and-swap UPDATE (queued -> delivered), so two concurrent polls
    never both get one: a command is delivered at most once. The agent has the command's ttl again
    to answer (``answer_by``)."""
    now = now or timezone.now()
    expire_commands(now, node_id=node_id)
    queued = AgentCommand.objects.filter(node_id=node_id, status=CommandStatus.QUEUED, expires_at__gt=now)
    taken: list[AgentCommand] = []
    for command in queued.order_by("created", "id")[:DELIVER_BATCH]:
        claimed = AgentCommand.objects.filter(pk=command.pk, status=CommandStatus.QUEUED, expires_at__gt=now)
        answer_by = now + (command.expires_at - command.created)
        if claimed.update(status=CommandStatus.DELIVERED, delivered_at=now, answer_by=answer_by):
            command.status, command.delivered_at, command.answer_by = CommandStatus.DELIVERED, now, answer_by
            taken.append(command)
    return taken


@dataclass(frozen=True)
class CommandResult:
    """What the agent reports for a command it was handed."""

    status: str
    summary: str = ""
    result: dict[str, Any] | None = None


def _check_result(result: CommandResult) -> dict[str, Any]:
    if result.status not in COMMAND_OUTCOMES:
        raise ValidationError({"status": [f"Must be one of {', '.join(COMMAND_OUTCOMES)}."]})
    body = result.result or {}
    text = json.dumps(body, ensure_ascii=False)
    if len(text.encode()) > COMMAND_RESULT_MAX_BYTES:
        raise ValidationError({"result": [f"At most {COMMAND_RESULT_MAX_BYTES} bytes of JSON."]})
    if "\\u0000" in text or "\x00" in result.summary:  # PostgreSQL text and jsonb refuse NUL (JSON writes \u0000)
        raise ValidationError({"result": ["May not contain NUL characters."]})
    return body


def record_command_result(command_id: int, node_id: int, *, result: CommandResult) -> tuple[AgentCommand, bool]:
    """Record the agent's outcome; returns the command and whether this call changed it.

    Another node's command is AgentCommand.DoesNotExist (the API answers 404 and leaks nothing).
    A result for a finished command changes nothing (the agent resends after a timeout; the first
    word stands). A command never delivered cannot have a result: CommandConflict (409)."""
    body = _check_result(result)
    with transaction.atomic():
        command = AgentCommand.objects.select_for_update().get(pk=command_id, node_id=node_id)
        if command.status in FINISHED_COMMAND_STATUSES:
            return command, False
        if command.status != CommandStatus.DELIVERED:
            raise CommandConflict(f"Command {command.pk} was never delivered; no result can be recorded.")
        command.status, command.summary, command.result = result.status, result.summary[:300], body
        command.finished_at = timezone.now()
        command.save(update_fields=["status", "summary", "result", "finished_at"])
        hostname = Node.objects.values_list("hostname", flat=True).get(pk=node_id)
        record_event(
            node_id,
            EventKind.ACTION,
            actor=Actor.system(f"agent:{hostname}"),
            reason=f"Agent command {describe(command)} {command.status}"
            + (f": {command.summary}" if command.summary else ""),
            details={"agent_command": command.pk, "verb": command.verb, "command_status": command.status},
        )
        _queue_result_followups(command.pk)
    return command, True


def expire_commands(now: datetime | None = None, *, node_id: int | None = None) -> int:
    """Queued commands past ``expires_at`` become expired (never delivered), delivered ones past
    ``answer_by`` failed (unanswered); returns how many.

    Compare-and-swap per command: a poll that takes it (or a result that finishes it) meanwhile
    wins. At most a batch of each per call."""
    now = now or timezone.now()
    return _expire_queued(now, node_id) + _fail_unanswered(now, node_id)


def _expire_queued(now: datetime, node_id: int | None) -> int:
    stale = AgentCommand.objects.filter(status=CommandStatus.QUEUED, expires_at__lte=now)
    if node_id is not None:
        stale = stale.filter(node_id=node_id)
    expired = 0
    for command in stale.order_by("expires_at")[:EXPIRE_BATCH]:
        with transaction.atomic():
            if not AgentCommand.objects.filter(pk=command.pk, status=CommandStatus.QUEUED).update(
                status=CommandStatus.EXPIRED, finished_at=now, summary="Not taken by the node's agent in time."
            ):
                continue
            record_event(
                command.node_id,
                EventKind.ACTION,
                actor=Actor.system("telemetry.commands"),
                reason=f"Agent command {describe(command)} expired: the agent did not take it by {command.expires_at:%Y-%m-%d %H:%M:%S} UTC",
                details={"agent_command": command.pk, "verb": command.verb, "command_status": CommandStatus.EXPIRED},
            )
            _queue_result_followups(command.pk)
            expired += 1
    return expired


def _fail_unanswered(now: datetime, node_id: int | None) -> int:
    """Delivered commands the agent did not answer by ``answer_by``: failed, saying so."""
    stale = AgentCommand.objects.filter(status=CommandStatus.DELIVERED, answer_by__lte=now)
    if node_id is not None:
        stale = stale.filter(node_id=node_id)
    failed = 0
    for command in stale.order_by("answer_by")[:EXPIRE_BATCH]:
        summary = f"Unanswered: the agent took it at {command.delivered_at:%H:%M:%S} UTC and never reported."
        with transaction.atomic():
            if not AgentCommand.objects.filter(pk=command.pk, status=CommandStatus.DELIVERED).update(
                status=CommandStatus.FAILED, finished_at=now, summary=summary
            ):
                continue
            record_event(
                command.node_id,
                EventKind.ACTION,
                actor=Actor.system("telemetry.commands"),
                reason=f"Agent command {describe(command)} failed: {summary}",
                details={"agent_command": command.pk, "verb": command.verb, "command_status": CommandStatus.FAILED},
            )
            _queue_result_followups(command.pk)
            failed += 1
    return failed
