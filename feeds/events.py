"""Node events as CloudEvents 1.0, and the settled horizon readers stop at.

A NodeEvent becomes one CloudEvent (structured mode, JSON): ``id`` is the event's id, ``source``
``/nodewarden/nodes/<node id>``, ``type`` ``io.nodewarden.node.<kind>``, ``subject`` the
hostname, ``time`` when it happened, ``data`` its fields. The envelope is built here (a dozen
keys) rather than with the ``cloudevents`` SDK, which the product does not otherwise need.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from nodes.choices import EventKind
from nodes.models import NodeEvent

from .models import FeedHorizon

SPECVERSION = "1.0"
TYPE_PREFIX = "io.nodewarden.node."
TYPES = [TYPE_PREFIX + kind for kind in EventKind.values]
# The horizon looks at most this many new ids per advance; the next advance goes on.
HORIZON_SCAN = 5000


def type_of(kind: str) -> str:
    return TYPE_PREFIX + kind


def kind_of(event_type: str) -> str:
    return event_type.removeprefix(TYPE_PREFIX)


def for_feed(events: QuerySet[NodeEvent]) -> QuerySet[NodeEvent]:
    """What building a CloudEvent reads: the node's tenant and cluster in the same query."""
    return events.select_related("node__tenant", "node__cluster").order_by("id")


def cloudevent(event: NodeEvent) -> dict[str, Any]:
    """The CloudEvent of one node event (the node's tenant and cluster as they are now)."""
    node = event.node
    return {
        "specversion": SPECVERSION,
        "id": str(event.pk),
        "source": f"/nodewarden/nodes/{event.node_id}" if event.node_id else "/nodewarden/nodes",
        "type": type_of(event.kind),
        "subject": event.hostname,
        "time": event.created.isoformat(),
        "datacontenttype": "application/json",
        "data": {
            "node_id": event.node_id,
            "hostname": event.hostname,
            "tenant": node.tenant.slug if node is not None and node.tenant is not None else None,
            "cluster": node.cluster.name if node is not None and node.cluster is not None else None,
            "kind": event.kind,
            "transition": event.transition,
            "source_state": event.source_state,
            "target_state": event.target_state,
            "reason": event.reason,
            "actor": event.actor_name,
            "actor_kind": event.actor_kind,
            "correlation_id": event.correlation_id,
            "details": event.details,
        },
    }


def settle_after() -> timedelta:
    return timedelta(seconds=int(settings.NODEWARDEN_FEED_SETTLE_SECONDS))


def advance_horizon(now: datetime | None = None) -> int:
    """Move the horizon over every id now settled; returns it. Cheap when nothing is new:
    one indexed read of at most HORIZON_SCAN ids past it."""
    now = now or timezone.now()
    with transaction.atomic():
        FeedHorizon.objects.get_or_create(pk=1)
        # One advancer at a time; a reader that finds it busy takes the horizon as it stands.
        horizon = FeedHorizon.objects.select_for_update(skip_locked=True).filter(pk=1).first()
        if horizon is None:
            return FeedHorizon.objects.get(pk=1).last_id
        before = (horizon.last_id, horizon.pending_max_id)
        _settle(horizon, now)
        ids = list(
            NodeEvent.objects.filter(pk__gt=horizon.last_id).order_by("pk").values_list("pk", flat=True)[:HORIZON_SCAN]
        )
        if _walk(horizon, ids) and horizon.pending_max_id is None:
            horizon.pending_max_id, horizon.pending_seen_at = ids[-1], now
            if _settle(horizon, now):  # a settle time of 0: the gap is settled at once
                _walk(horizon, ids)
        if (horizon.last_id, horizon.pending_max_id) != before:  # readers poll: no write when idle
            horizon.save()
        return horizon.last_id


def _walk(horizon: FeedHorizon, ids: list[int]) -> bool:
    """Advance over the ids that follow the horizon without a gap; True if a gap stopped it."""
    for pk in ids:
        if pk <= horizon.last_id:
            continue
        if pk != horizon.last_id + 1:
            return True
        horizon.last_id = pk
    return False


def _settle(horizon: FeedHorizon, now: datetime) -> bool:
    """Jump over the pending gap once it has been seen for the settle time. Every id up to
    pending_max_id was taken before pending_seen_at: what is still missing rolled back."""
    if horizon.pending_max_id is None or horizon.pending_seen_at is None:
        return False
    if now - horizon.pending_seen_at < settle_after():
        return False
    horizon.last_id = max(horizon.last_id, horizon.pending_max_id)
    horizon.pending_max_id = horizon.pending_seen_at = None
    return True


def horizon() -> int:
    """The settled horizon as last advanced (0 before the first advance)."""
    return FeedHorizon.objects.filter(pk=1).values_list("last_id", flat=True).first() or 0
