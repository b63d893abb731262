"""Nodewarden's alerts, pushed to Prometheus Alertmanager (API v2, ``POST /api/v2/alerts``).

Each alert becomes one Alertmanager alert. Labels (what routes, groups, inhibits and silences
match): ``alertname="NodewardenAlert"``, ``node``, ``cluster``, ``site``, ``tenant`` (slugs),
``rule``, ``severity`` (Nodewarden's own: catastrophic, degraded, warning, info), ``component``
(``gpu3`` or ``node``), ``acknowledged`` (``"true"``/``"false"``) and ``nodewarden_alert_id``
(the identity; our webhook receiver ignores alerts that carry it, so a route back to Nodewarden
makes no loop). Annotations: ``summary``, ``node_url`` (also the ``generatorURL``),
``recommended_action``, and who acknowledged it with their note.

Timing: a firing alert is sent with ``endsAt`` = now + 4 resend intervals, like Prometheus does:
the beat task (``resend``) sends every firing alert again each interval, so a restarted
Alertmanager learns the state within one, and alerts of a Nodewarden that went away resolve
by themselves. A resolved alert is sent with ``endsAt`` = its resolution time, and sent again for
4 intervals after that so a resolution whose push failed still arrives.

Who wins: a Nodewarden silence means "nobody needs to hear of it": the alert is sent as resolved
until the silence ends. A Nodewarden acknowledgement keeps it firing with ``acknowledged="true"``
(routing decides what that means). An Alertmanager silence mutes notifications only and changes
nothing in Nodewarden.

Severity and ``acknowledged`` are labels, so they are part of the alert's identity in
Alertmanager: when a verb changes one (escalation, acknowledgement), the push on that change also
resolves the alert's earlier label sets, or Alertmanager would show both until they expire.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from .choices import SEVERITY_RANK, AlertState, RecommendedAction
from .models import Alert, AlertmanagerTally

log = logging.getLogger(__name__)

ALERTNAME = "NodewardenAlert"
OWN_LABEL = "nodewarden_alert_id"
BATCH = 500  # alerts per POST: a few hundred kB, well inside Alertmanager's limits
MAX_PER_RUN = 20_000  # alerts one resend run sends at most (oldest first); the rest wait a run
VALIDITY = 4  # resend intervals a firing alert stays valid in Alertmanager without news


@dataclass(frozen=True)
class Receiver:
    """One Alertmanager: where to POST, its credentials, and its name on /metrics (no credentials)."""

    url: str
    name: str
    authorization: str


def receivers() -> list[Receiver]:
    """The configured Alertmanagers (NODEWARDEN_ALERTMANAGER_URL); [] when pushing is off."""
    found = []
    for base in settings.NODEWARDEN_ALERTMANAGER_URLS:
        parts = urlsplit(base.rstrip("/"))
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        auth = ""
        if parts.username:
            token = f"{parts.username}:{parts.password or ''}".encode()
            auth = "Basic " + base64.b64encode(token).decode()
        name = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        found.append(Receiver(url=f"{name}/api/v2/alerts", name=name, authorization=auth))
    return found


def validity() -> timedelta:
    return timedelta(seconds=VALIDITY * settings.NODEWARDEN_ALERTMANAGER_RESEND_SECONDS)


def node_url(node_id: int) -> str:
    return str(settings.PORTAL_URL).rstrip("/") + reverse("node-detail", args=[node_id])


def labels_of(alert: Alert, *, severity: str | None = None, acknowledged: bool | None = None) -> dict[str, str]:
    """The alert's label set (see the module docstring); empty values are left out, as Prometheus does."""
    node = alert.node
    if acknowledged is None:
        acknowledged = alert.acknowledged_at is not None
    labels = {
        "alertname": ALERTNAME,
        "node": node.hostname,
        "cluster": node.cluster.name if node.cluster else "",
        "site": node.site.slug,
        "tenant": node.tenant.slug if node.tenant else "",
        "rule": alert.rule,
        "severity": severity or alert.severity,
        "component": f"gpu{alert.gpu_index}" if alert.gpu_index is not None else "node",
        "acknowledged": "true" if acknowledged else "false",
        OWN_LABEL: str(alert.pk),
    }
    return {key: value for key, value in labels.items() if value}


def annotations_of(alert: Alert) -> dict[str, str]:
    notes = {
        "summary": alert.summary,
        "node_url": node_url(alert.node_id),
        "recommended_action": RecommendedAction(alert.recommended_action).label,
    }
    if alert.acknowledged_at is not None:
        who = alert.acknowledged_by.get_username() if alert.acknowledged_by else "someone"
        notes["acknowledged_by"] = who
        notes["acknowledged_note"] = alert.acknowledged_note
    if alert.is_silenced():
        notes["silenced_reason"] = alert.silenced_reason
    return {key: value for key, value in notes.items() if value}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def ends_at(alert: Alert, now: datetime) -> datetime:
    """Resolved: when it was. Silenced in Nodewarden: now (Alertmanager sees it resolved).
    Firing: valid for ``VALIDITY`` resend intervals."""
    if alert.state == AlertState.RESOLVED:
        return alert.resolved_at or now
    if alert.is_silenced(now):
        return now
    return now + validity()


def entries(alert: Alert, now: datetime, *, retire_earlier: bool = False) -> list[dict[str, Any]]:
    """The alert as Alertmanager alerts: its current label set, and with ``retire_earlier`` every
    label set it may have had before (lower severities, not yet acknowledged), resolved now."""
    end = ends_at(alert, now)
    # Alertmanager refuses a whole batch over one alert that ends before it starts (a finding
    # observed on a node whose clock runs ahead can open an alert "in the future").
    start = min(alert.first_seen, end)
    common = {"annotations": annotations_of(alert), "generatorURL": node_url(alert.node_id), "startsAt": _iso(start)}
    found = [{"labels": labels_of(alert), "endsAt": _iso(end), **common}]
    if retire_earlier:
        current = (alert.severity, alert.acknowledged_at is not None)
        retired_end = _iso(max(min(now, end), start))
        for severity, rank in SEVERITY_RANK.items():
            for acked in {False, current[1]}:
                if rank <= alert.severity_rank and (severity, acked) != current:
                    labels = labels_of(alert, severity=severity, acknowledged=acked)
                    found.append({"labels": labels, "endsAt": retired_end, **common})
    return found


def _with_node(queryset: QuerySet[Alert]) -> QuerySet[Alert]:
    # Labels read the node's cluster, site and tenant; annotations the acknowledging user.
    return queryset.select_related("node__cluster", "node__site", "node__tenant", "acknowledged_by")


class PushFailed(Exception):
    """Alertmanager refused the batch or did not answer."""


def post(receiver: Receiver, body: list[dict[str, Any]]) -> None:
    """POST one batch; raises ``PushFailed`` with Alertmanager's answer or the network error."""
    # S310: the URL is NODEWARDEN_ALERTMANAGER_URL, refused at start-up unless http(s).
    request = urllib.request.Request(receiver.url, data=json.dumps(body).encode(), method="POST")  # noqa: S310
    request.add_header("Content-Type", "application/json")
    if receiver.authorization:
        request.add_header("Authorization", receiver.authorization)
    try:
        with urllib.request.urlopen(request, timeout=settings.NODEWARDEN_ALERTMANAGER_TIMEOUT) as response:  # noqa: S310
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").strip()
        raise PushFailed(f"HTTP {exc.code}: {detail}") from exc
    except (OSError, ValueError) as exc:  # URLError, timeouts, refused connections, a bad URL
        raise PushFailed(str(getattr(exc, "reason", exc))) from exc


def _tally(receiver: Receiver, *, sent: int = 0, error: str = "") -> None:
    """Count one POST on the receiver's row (F() increments: several workers push at once)."""
    now = timezone.now()
    AlertmanagerTally.objects.get_or_create(receiver=receiver.name[:300])
    rows = AlertmanagerTally.objects.filter(receiver=receiver.name[:300])
    if error:
        rows.update(failures=F("failures") + 1, last_failure_at=now, last_error=error[:300])
    else:
        rows.update(pushes=F("pushes") + 1, alerts_sent=F("alerts_sent") + sent, last_success_at=now)


def send(receiver: Receiver, body: list[dict[str, Any]]) -> bool:
    """POST a batch and count it. A failure is logged and counted, never raised: the next resend heals it."""
    if not body:
        return True
    try:
        post(receiver, body)
    except PushFailed as exc:
        log.warning("alertmanager %s: push of %d alerts failed: %s", receiver.name, len(body), exc)
        _tally(receiver, error=str(exc))
        return False
    _tally(receiver, sent=len(body))
    return True


def push_alerts(alert_ids: Iterable[int]) -> dict[str, int]:
    """Push these alerts now, retiring their earlier label sets (the follow-up of a verb)."""
    targets = receivers()
    if not targets:
        return {"alerts": 0, "failed": 0}
    now = timezone.now()
    alerts = list(_with_node(Alert.objects.filter(pk__in=list(alert_ids)[:BATCH])))
    body = [entry for alert in alerts for entry in entries(alert, now, retire_earlier=True)]
    failed = sum(1 for target in targets if not send(target, body))
    return {"alerts": len(alerts), "failed": failed}


def _due(now: datetime) -> Iterator[list[Alert]]:
    """Firing alerts, and alerts resolved within the validity window, in batches by id (keyset)."""
    wanted = Q(state=AlertState.FIRING) | Q(state=AlertState.RESOLVED, resolved_at__gte=now - validity())
    last, sent = 0, 0
    while sent < MAX_PER_RUN:
        batch = list(_with_node(Alert.objects.filter(wanted, pk__gt=last)).order_by("pk")[:BATCH])
        if not batch:
            return
        yield batch
        last, sent = batch[-1].pk, sent + len(batch)
    log.warning("alertmanager: more than %d alerts to resend; the rest wait for the next run", MAX_PER_RUN)


def resend(now: datetime | None = None) -> dict[str, int]:
    """Send every firing (and lately resolved) alert again to every Alertmanager. A receiver that
    fails is left alone for the rest of this run (one timeout, not one per batch)."""
    targets = receivers()
    now = now or timezone.now()
    alerts = failed = 0
    for batch in _due(now) if targets else ():
        body = [entry for alert in batch for entry in entries(alert, now)]
        alerts += len(batch)
        for target in list(targets):
            if not send(target, body):
                targets.remove(target)
                failed += 1
        if not targets:
            break
    return {"alerts": alerts, "failed_receivers": failed}
