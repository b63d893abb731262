"""The safety rails every automated action passes first: holds, tripped circuit breakers,
blast-radius limits per failure domain, and maintenance windows for disruptive rungs.

``block_reason`` answers why an action may not proceed now (None: it may). A blocked
remediation is queued and the reconciler tries again later; nothing is lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta

from django.db.models import Count, F, Q
from django.utils import timezone

from health.choices import Severity
from health.models import Finding
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent

from .choices import DISRUPTIVE, Domain
from .models import BlastRadiusLimit, CircuitBreaker, Hold, MaintenanceWindow

S = NodeState
SERVING = (S.PRODUCTION, S.DRAIN_PENDING)
OUT = (S.DRAINING, S.MAINTENANCE, S.TRIAGE, S.REMEDIATING, S.REPAIR, S.RMA)  # capacity out, planned or not
DEFAULT_LIMIT = BlastRadiusLimit(domain=Domain.CLUSTER, max_share=0.1, max_count=50, max_drains_per_hour=20)
# Findings spike: at least this share of a cluster's nodes (and this many) with a degraded or
# catastrophic finding within the window trips the cluster's breaker.
# (Settings NODEWARDEN_BREAKER_SHARE, _MIN_NODES, _WINDOW_SECONDS: 0.3, 5, 600 s by default.)


def breaker_thresholds() -> tuple[float, int, timedelta]:
    from django.conf import settings

    return (
        float(settings.NODEWARDEN_BREAKER_SHARE),
        int(settings.NODEWARDEN_BREAKER_MIN_NODES),
        timedelta(seconds=settings.NODEWARDEN_BREAKER_WINDOW_SECONDS),
    )


TAKE_OUT_TRANSITIONS = ("cordon", "request_drain", "start_draining")


def active_hold(node: Node, now: datetime) -> Hold | None:
    scope = Q(node=node) | Q(node__isnull=True, cluster__isnull=True, rack__isnull=True, tenant__isnull=True)
    if node.cluster_id:
        scope |= Q(cluster_id=node.cluster_id)
    if node.rack_id:
        scope |= Q(rack_id=node.rack_id)
    if node.tenant_id:
        scope |= Q(tenant_id=node.tenant_id)
    return (
        Hold.objects.filter(scope, released_at__isnull=True)
        .filter(Q(until__isnull=True) | Q(until__gt=now))
        .order_by("created")
        .first()
    )


def tripped_breaker(node: Node) -> CircuitBreaker | None:
    if not node.cluster_id:
        return None
    return CircuitBreaker.objects.filter(cluster_id=node.cluster_id, reset_at__isnull=True).first()


def maybe_trip_breaker(node: Node, now: datetime) -> CircuitBreaker | None:
    """Trip the node's cluster breaker if findings spike there (a bad rule or telemetry source
    making half a cluster look broken); returns the tripped breaker, new or standing."""
    if not node.cluster_id:
        return None
    share, min_nodes, window = breaker_thresholds()
    since = now - window
    # One read: the standing breaker (at most one per cluster) sorts first, else the latest reset.
    latest = (
        CircuitBreaker.objects.filter(cluster_id=node.cluster_id).order_by(F("reset_at").desc(nulls_first=True)).first()
    )
    if latest is not None and latest.reset_at is None:
        return latest
    if latest is not None and latest.reset_at is not None and latest.reset_at > since:
        since = latest.reset_at  # an operator looked at the findings before the reset
    size = Node.objects.filter(cluster_id=node.cluster_id).exclude(state=S.DECOMMISSIONED).count()
    hit = (
        Finding.objects.filter(
            node__cluster_id=node.cluster_id,
            shadow=False,
            created__gte=since,
            severity__in=(Severity.DEGRADED, Severity.CATASTROPHIC),
        )
        .values("node_id")
        .distinct()
        .count()
    )
    if hit < min_nodes or hit < share * size:
        return None
    reason = (
        f"{hit} of {size} nodes of {node.cluster} had degraded or catastrophic findings within "
        f"{int(window.total_seconds() // 60)} min: automated actions stop until an operator resets it"
    )
    breaker, _ = CircuitBreaker.objects.get_or_create(
        cluster_id=node.cluster_id, reset_at__isnull=True, defaults={"reason": reason, "tripped_at": now}
    )
    return breaker


def _limits(*, configured_only: bool = False) -> dict[str, BlastRadiusLimit]:
    """The limit of each domain (one read of the few rows); the cluster's has a default for
    automation unless ``configured_only``."""
    found = {limit.domain: limit for limit in BlastRadiusLimit.objects.all()}
    if not configured_only:
        found.setdefault(Domain.CLUSTER, DEFAULT_LIMIT)
    return found


def _domain_lookup(node: Node, domain: str) -> tuple[str, int] | None:
    """The node's failure domain of this kind as a (field, id) lookup; None if it is in none."""
    fields: dict[str, str] = {Domain.CLUSTER: "cluster_id", Domain.RACK: "rack_id", Domain.TENANT: "tenant_id"}
    field = fields[domain]
    value: int | None = getattr(node, field)
    return (field, value) if value else None


def blast_radius_block(
    node: Node, now: datetime, *, leaving: tuple[str, ...] = OUT, configured_only: bool = False
) -> str | None:
    """Why taking this serving node out now would exceed a domain's limit, or None. For an
    operator's bulk action (``remediation.bulk``): ``leaving`` also counts the nodes set to drain,
    and ``configured_only`` applies the limits an admin configured, not the built-in default for
    automation (10% of a cluster would refuse an operator any node of a cluster under ten)."""
    limits = _limits(configured_only=configured_only)
    for domain in Domain.values:
        limit, lookup = limits.get(domain), _domain_lookup(node, domain)
        if limit is None or lookup is None:
            continue
        field, value = lookup
        nodes = Node.objects.filter(**{field: value}).exclude(pk=node.pk)
        counts = dict(nodes.values_list("state").annotate(n=Count("id")).order_by())
        out = sum(counts.get(s, 0) for s in leaving)
        total = out + sum(counts.get(s, 0) for s in SERVING if s not in leaving) + 1
        label = Domain(domain).label.lower()
        if out + 1 > limit.max_count or (out + 1) / total > limit.max_share:
            return (
                f"blast-radius limit of the {label}: {out} of {total} nodes already out of production "
                f"(limit {limit.max_share:.0%} and {limit.max_count} nodes)"
            )
        drains = NodeEvent.objects.filter(
            **{f"node__{field}": value},  # the same domain, through the history row's node
            transition__in=TAKE_OUT_TRANSITIONS,
            actor_name__startswith="system:remediation",
            created__gte=now - timedelta(hours=1),
        ).count()
        if drains >= limit.max_drains_per_hour:
            return f"drain-rate limit of the {label}: {drains} automated drains in the last hour (limit {limit.max_drains_per_hour})"
    return None


# How the reasons below begin: a queued remediation keeps its reason (``queued_reason``), and
# ``wait_kind`` tells a node's owner which kind of wait it is without the hold's words or author.
OUTSIDE_WINDOW = "disruptive rung outside a maintenance window"
ON_HOLD = "on hold"
LIMITS = ("blast-radius limit", "drain-rate limit", "circuit breaker")


def wait_kind(reason: str) -> str:
    """The kind of wait a queued remediation's reason names, in a customer's words. A reason that
    is none of the rails' is ``services.confirming``'s: the finding is given time to clear by itself."""
    if reason.startswith(OUTSIDE_WINDOW):
        return "a maintenance window"
    if reason.startswith(ON_HOLD):
        return "a hold"
    if reason.startswith(LIMITS):
        return "a safety limit"
    return "a check that the problem does not clear by itself"


def _windows(node: Node) -> list[MaintenanceWindow]:
    return list(MaintenanceWindow.objects.filter(Q(cluster__isnull=True) | Q(cluster_id=node.cluster_id)))


def window_block(node: Node, rung: str, now: datetime) -> str | None:
    """Disruptive rungs of a window-only policy wait for a maintenance window."""
    if rung not in DISRUPTIVE:
        return None
    windows = _windows(node)
    if any(w.is_open(now) for w in windows):
        return None
    return OUTSIDE_WINDOW + ("" if windows else " (none is configured)")


def next_window_opening(node: Node, now: datetime) -> datetime | None:
    """When the node's next maintenance window opens (now if one is open), or None if none is
    configured. Windows open on the hour (``start_hour``) and repeat weekly: a week of hours is
    enough to find the next one. One query."""
    windows = _windows(node)
    if not windows:
        return None
    if any(w.is_open(now) for w in windows):
        return now
    hour = now.replace(minute=0, second=0, microsecond=0)
    for i in range(1, 7 * 24 + 1):
        at = hour + timedelta(hours=i)
        if any(w.is_open(at) for w in windows):
            return at
    return None  # every window names no hour (start_hour == end_hour): never opens


def block_reason(node: Node, *, taking_out: bool, now: datetime | None = None) -> str | None:
    """Why no automated action may touch this node now (hold, breaker, limits), or None."""
    now = now or timezone.now()
    hold = active_hold(node, now)
    if hold is not None:
        return f"{ON_HOLD}: {hold.reason} ({hold.actor_name})"
    breaker = maybe_trip_breaker(node, now)
    if breaker is not None:
        return f"circuit breaker tripped for {node.cluster}: {breaker.reason}"
    if taking_out and node.state in SERVING:
        return blast_radius_block(node, now)
    return None


# --- The rails counted once for a batch of admissions ----------------------------------------------
_ACTIVE_RAILS: ContextVar[Rails | None] = ContextVar("remediation_rails", default=None)


class Rails:
    """``block_reason`` for a batch of findings admitted in order, in one transaction under their
    cluster's lock (``services.consider_findings``): the holds, the limits, each breaker, each domain's
    nodes per state and its automated drains in the hour are read once, then kept up to date in
    memory from every change of state the transaction records (``note``, a ``nodes.followups``
    recorder while the rails are ``active``). The verdicts are those of ``block_reason`` asked
    before each admission: nothing else can take a node of the locked cluster out by automation
    meanwhile, and the findings the breaker counts do not change inside the transaction."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._holds: list[Hold] | None = None
        self._limits: dict[str, BlastRadiusLimit] | None = None
        self._breakers: dict[int, CircuitBreaker | None] = {}
        self._states: dict[tuple[str, int], dict[str, int]] = {}
        self._drains: dict[tuple[str, int], int] = {}

    @contextmanager
    def active(self) -> Iterator[Rails]:
        """While inside: every change of state recorded (``nodes.followups.state_changed``) is noted."""
        token = _ACTIVE_RAILS.set(self)
        try:
            yield self
        finally:
            _ACTIVE_RAILS.reset(token)

    def forget(self) -> None:
        """Read everything again at the next question (after a finding's work was rolled back)."""
        self._holds, self._limits = None, None
        self._breakers.clear()
        self._states.clear()
        self._drains.clear()

    def block_reason(self, node: Node, *, taking_out: bool) -> str | None:
        """``block_reason(node, taking_out=..., now=self.now)``, from the counts in hand."""
        hold = self._hold(node)
        if hold is not None:
            return f"{ON_HOLD}: {hold.reason} ({hold.actor_name})"
        breaker = self._breaker(node)
        if breaker is not None:
            return f"circuit breaker tripped for {node.cluster}: {breaker.reason}"
        if taking_out and node.state in SERVING:
            return self._blast_radius(node)
        return None

    def _hold(self, node: Node) -> Hold | None:
        if self._holds is None:  # the standing holds of the whole fleet: a few rows
            self._holds = list(
                Hold.objects.filter(released_at__isnull=True)
                .filter(Q(until__isnull=True) | Q(until__gt=self.now))
                .order_by("created", "pk")
            )
        for hold in self._holds:
            fleet_wide = not (hold.node_id or hold.cluster_id or hold.rack_id or hold.tenant_id)
            if (
                fleet_wide
                or hold.node_id == node.pk
                or (node.cluster_id and hold.cluster_id == node.cluster_id)
                or (node.rack_id and hold.rack_id == node.rack_id)
                or (node.tenant_id and hold.tenant_id == node.tenant_id)
            ):
                return hold
        return None

    def _breaker(self, node: Node) -> CircuitBreaker | None:
        if not node.cluster_id:
            return None
        if node.cluster_id not in self._breakers:
            self._breakers[node.cluster_id] = maybe_trip_breaker(node, self.now)
        return self._breakers[node.cluster_id]

    def _blast_radius(self, node: Node) -> str | None:
        if self._limits is None:
            self._limits = _limits()
        for domain in Domain.values:
            limit, lookup = self._limits.get(domain), _domain_lookup(node, domain)
            if limit is None or lookup is None:
                continue
            field, value = lookup
            counts = dict(self._counts(field, value))
            counts[node.state] = counts.get(node.state, 0) - 1  # the others: as ``exclude(pk=node.pk)``
            out = sum(counts.get(s, 0) for s in OUT)
            total = out + sum(counts.get(s, 0) for s in SERVING) + 1
            label = Domain(domain).label.lower()
            if out + 1 > limit.max_count or (out + 1) / total > limit.max_share:
                return (
                    f"blast-radius limit of the {label}: {out} of {total} nodes already out of production "
                    f"(limit {limit.max_share:.0%} and {limit.max_count} nodes)"
                )
            drains = self._drain_count(field, value)
            if drains >= limit.max_drains_per_hour:
                return f"drain-rate limit of the {label}: {drains} automated drains in the last hour (limit {limit.max_drains_per_hour})"
        return None

    def _counts(self, field: str, value: int) -> dict[str, int]:
        key = (field, value)
        if key not in self._states:
            nodes = Node.objects.filter(**{field: value})
            self._states[key] = dict(nodes.values_list("state").annotate(n=Count("id")).order_by())
        return self._states[key]

    def _drain_count(self, field: str, value: int) -> int:
        key = (field, value)
        if key not in self._drains:
            self._drains[key] = NodeEvent.objects.filter(
                **{f"node__{field}": value},
                transition__in=TAKE_OUT_TRANSITIONS,
                actor_name__startswith="system:remediation",
                created__gte=self.now - timedelta(hours=1),
            ).count()
        return self._drains[key]

    def note(self, event: NodeEvent) -> None:
        """A change of state recorded in the transaction: the counts of the node's domains follow it."""
        node = event.node
        if node is None:
            return
        for field in ("cluster_id", "rack_id", "tenant_id"):
            key = (field, getattr(node, field))
            counts = self._states.get(key)
            if counts is not None:
                counts[event.source_state] = counts.get(event.source_state, 0) - 1
                counts[event.target_state] = counts.get(event.target_state, 0) + 1
            automated = event.transition in TAKE_OUT_TRANSITIONS and event.actor_name.startswith("system:remediation")
            if key in self._drains and automated and event.created >= self.now - timedelta(hours=1):
                self._drains[key] += 1


def note_state_change(event: NodeEvent) -> None:
    """``nodes.followups`` recorder: the active rails, if any, count the change."""
    rails = _ACTIVE_RAILS.get()
    if rails is not None:
        rails.note(event)
