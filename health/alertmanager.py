"""Prometheus Alertmanager webhook receiver: alerts become findings on the node their labels name.

Alertmanager posts webhook JSON version 4 (``alerts[]`` with status, labels, annotations,
startsAt, endsAt, fingerprint, generatorURL). Each alert is matched to a node by its
``hostname``, ``Hostname``, ``node``, ``nodename`` or ``instance`` label (port stripped; the
node's full hostname or its short name). Alerts that match no node are stored as
``UnroutedAlert`` and listed in the response: never silently dropped. Alerts Nodewarden itself
pushed (``health.alertmanager_push``, label ``nodewarden_alert_id``) and an Alertmanager route sent
back are skipped: they are findings already, and taking them again would loop.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import msgspec
from django.db.models import Q

from nodes.models import Node
from nodes.services import Actor
from telemetry.schema import refuse_nul

from .alertmanager_push import OWN_LABEL
from .choices import RecommendedAction, Severity
from .models import UnroutedAlert
from .ruleconfig import rule_config
from .services import clear_condition, raise_finding

RULE = "alertmanager"
HOST_LABELS = ("hostname", "Hostname", "node", "nodename", "instance")
SEVERITY_LABELS = {
    "page": Severity.CATASTROPHIC,
    "catastrophic": Severity.CATASTROPHIC,
    "critical": Severity.DEGRADED,
    "degraded": Severity.DEGRADED,
    "error": Severity.DEGRADED,
    "warning": Severity.WARNING,
    "info": Severity.INFO,
    "none": Severity.INFO,
}
MAX_ALERTS = 1000


class WebhookAlert(msgspec.Struct):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: str = ""
    endsAt: str = ""
    fingerprint: str = ""
    generatorURL: str = ""


class Webhook(msgspec.Struct):
    """Alertmanager's webhook body; fields we do not use (groupKey, externalURL, ...) are ignored."""

    alerts: list[WebhookAlert]
    version: str = "4"
    status: str = ""
    receiver: str = ""
    groupLabels: dict[str, str] = {}
    commonLabels: dict[str, str] = {}


_decoder = msgspec.json.Decoder(Webhook)


def decode(body: bytes) -> Webhook:
    """Raises ``msgspec.ValidationError``/``DecodeError`` naming the field (``at `$.alerts[0].status```)."""
    refuse_nul(body)
    hook = _decoder.decode(body)
    if len(hook.alerts) > MAX_ALERTS:
        raise msgspec.ValidationError(f"Expected at most {MAX_ALERTS} alerts - at `$.alerts`")
    return hook


@dataclass
class Outcome:
    accepted: int = 0
    resolved: int = 0
    unmatched: list[dict[str, str]] = field(default_factory=list)


def host_candidates(labels: dict[str, str]) -> list[str]:
    names = []
    for key in HOST_LABELS:
        value = (labels.get(key) or "").strip()
        if key == "instance" and value.count(":") == 1:  # "host:9100"; a bare IPv6 has many colons
            value = value.rsplit(":", 1)[0]
        if value and value not in names:
            names.append(value.lower())
    return names


def _node_index(hook: Webhook) -> dict[str, list[int]]:
    """Full hostname and short name -> node ids, for every name the batch mentions (one query)."""
    names = {n for a in hook.alerts for n in host_candidates(a.labels)}
    if not names:
        return {}
    query = Q(hostname__in=names)
    for name in names:
        if "." not in name:
            query |= Q(hostname__istartswith=f"{name}.")
    index: dict[str, list[int]] = {}
    for pk, hostname in Node.objects.filter(query).values_list("pk", "hostname"):
        index.setdefault(hostname.lower(), []).append(pk)
        index.setdefault(hostname.lower().split(".")[0], []).append(pk)
    return index


def _match(alert: WebhookAlert, index: dict[str, list[int]]) -> tuple[int | None, str]:
    names = host_candidates(alert.labels)
    if not names:
        return None, f"no host label ({', '.join(HOST_LABELS)})"
    for name in names:
        ids = index.get(name, [])
        if len(ids) == 1:
            return ids[0], ""
        if len(ids) > 1:
            return None, f"{name!r} matches {len(ids)} nodes"
    return None, f"no node named {' or '.join(repr(n) for n in names)}"


def severity_of(labels: dict[str, str]) -> str:
    own = (labels.get("nodewarden_severity") or "").lower()
    if own in Severity.values:
        return own
    return SEVERITY_LABELS.get((labels.get("severity") or "").lower(), Severity.WARNING)


def _subject(alert: WebhookAlert) -> str:
    fingerprint = (
        alert.fingerprint or hashlib.sha256(json.dumps(alert.labels, sort_keys=True).encode()).hexdigest()[:16]
    )
    return f"{alert.labels.get('alertname', '')}|{fingerprint}"[:200]


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo and parsed.year > 1 else None  # Go's zero time means "unset"


def receive(hook: Webhook, *, actor: Actor) -> Outcome:
    """Route every alert of the webhook: firing -> finding and alert, resolved -> cleared."""
    outcome = Outcome()
    index = _node_index(hook)
    unrouted = []
    cfg = rule_config(RULE)
    for alert in hook.alerts:
        if OWN_LABEL in alert.labels:
            continue
        node_id, why = _match(alert, index)
        name = alert.labels.get("alertname", "")
        if node_id is None:
            outcome.unmatched.append({"fingerprint": alert.fingerprint, "alertname": name, "reason": why})
            unrouted.append(
                UnroutedAlert(
                    status=alert.status,
                    fingerprint=alert.fingerprint[:100],
                    alertname=name[:200],
                    labels=alert.labels,
                    annotations=alert.annotations,
                    reason=why[:300],
                )
            )
        elif alert.status == "resolved":
            clear_condition(node_id, rule=RULE, subject=_subject(alert), reason="resolved in Alertmanager")
            outcome.resolved += 1
        else:
            _fire(node_id, alert, cfg, actor)
            outcome.accepted += 1
    UnroutedAlert.objects.bulk_create(unrouted)
    return outcome


def _fire(node_id: int, alert: WebhookAlert, cfg: Any, actor: Actor) -> None:
    notes = alert.annotations
    name = alert.labels.get("alertname", "alert")
    action = alert.labels.get("nodewarden_action", "")
    raise_finding(
        node_id,
        rule=RULE,
        severity=severity_of(alert.labels),
        source="alertmanager",
        subject=_subject(alert),
        summary=f"{name}: {notes.get('summary') or notes.get('description') or ''}".strip(": ")[:500],
        recommended_action=action if action in RecommendedAction.values else cfg.recommended_action,
        observed_at=_parse_time(alert.startsAt),
        shadow=cfg.shadow,
        actor=actor,
        evidence={
            "labels": alert.labels,
            "annotations": notes,
            "startsAt": alert.startsAt,
            "fingerprint": alert.fingerprint,
            "generatorURL": alert.generatorURL,
        },
    )
