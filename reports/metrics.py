"""Prometheus metrics of the fleet, computed when scraped (``GET /metrics``).

A custom collector answers from a fixed, small number of aggregate queries (one per family,
never one per node), plus one round trip to Redis for the Celery queue depths when the broker
is Redis. Nothing is kept between scrapes: every figure is read from the database at scrape time.

Access (``allowed``): with the setting ``NODEWARDEN_METRICS_TOKEN`` (or the environment variable
of that name, or ``_FILE``), a scraper sends ``Authorization: Bearer <token>``; staff with a
session may always look; a client whose address is in ``NODEWARDEN_METRICS_NETWORKS`` (CIDRs,
none by default) needs neither. No address is trusted by default, the loopback included: behind
a reverse proxy on the same host every request comes from the loopback. The address is the one
``nodewarden.throttling.client_ip`` reads (``X-Forwarded-For`` only through
``NODEWARDEN_TRUSTED_PROXIES``). Wrong tokens count towards the client's lockout like any other.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from audit.choices import Invariant
from audit.models import AuditRun
from checks import freshness
from fabric.choices import DiscrepancyKind, TicketStatus
from fabric.models import Ticket
from fleet.models import Cluster
from health.choices import AlertState, Severity
from health.counts import firing_counts
from health.models import Alert, AlertmanagerTally, Finding
from nodes.choices import ACTIVE_KINDS
from nodes.counts import node_counts
from nodes.models import Node
from nodes.scoping import is_operator_view
from nodewarden.throttling import AuthFailureThrottle, client_ip
from remediation import summary
from remediation.choices import LADDER
from remediation.models import CircuitBreaker, Remediation, RemediationStep
from telemetry import groupcommit
from telemetry.models import NodeHealth, NodeReport

log = logging.getLogger(__name__)

INGEST_WINDOW = timedelta(minutes=5)
# Reports are read by their node's primary key (node, collected_at): one taken more than this long
# before it arrived (an agent's spool sent after a long outage) is left out of the rate.
COLLECTION_LAG = timedelta(minutes=30)
REDIS_TIMEOUT = 1.0  # seconds: a scrape must not hang on a broker that is down


def metrics_token() -> str:
    """The scrapers' bearer token (NODEWARDEN_METRICS_TOKEN); "" for none."""
    return str(settings.NODEWARDEN_METRICS_TOKEN).strip()


def in_scrape_network(request: HttpRequest) -> bool:
    """The client's address is in one of ``NODEWARDEN_METRICS_NETWORKS``."""
    networks = settings.NODEWARDEN_METRICS_NETWORKS
    if not networks:
        return False
    try:
        address = ipaddress.ip_address(client_ip(request).split("%")[0])
    except ValueError:
        return False
    return any(address in network for network in networks)


def allowed(request: HttpRequest, throttle: AuthFailureThrottle | None = None) -> bool:
    """The right bearer token, a staff session, or a client in a configured scrape network.

    A wrong bearer token is counted on ``throttle`` (the caller has checked its lockout).
    """
    token = metrics_token()
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        if token and hmac.compare_digest(header[7:].strip().encode(), token.encode()):
            return True
        if throttle is not None:
            throttle.record_failure(request)
    if is_operator_view(request.user):
        return True
    return in_scrape_network(request)


class FleetCollector(Collector):
    """Every fleet metric, read at collection time (see the module docstring)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        now = self.now or timezone.now()
        yield from self._nodes()
        yield self._by_severity(
            "nodewarden_findings_open",
            "Findings whose alert still fires, by severity.",
            Finding.objects.filter(shadow=False, alert__state=AlertState.FIRING),
        )
        yield from self._firing(now)
        yield from self._remediation()
        queues = self._queue_lengths()
        if queues is not None:
            yield queues
        yield self._ingest_rate(now)
        yield CounterMetricFamily(
            "nodewarden_ingest_busy",
            "Agent report requests answered 503 + Retry-After because the ingest queue was full "
            "(every web process, since the shared cache started).",
            value=groupcommit.busy_total(),
        )
        yield self._fabric_tickets()
        yield from self._audit()
        yield from self._check_coverage(now)
        yield self._breakers()
        yield from self._alertmanager()

    def _nodes(self) -> Iterator[Metric]:
        by_state = GaugeMetricFamily("nodewarden_nodes", "Nodes per lifecycle state.", labels=["state"])
        by_cluster = GaugeMetricFamily(
            "nodewarden_cluster_nodes",
            'Nodes per cluster and lifecycle state (cluster "": none).',
            labels=["cluster", "state"],
        )
        counts = node_counts(Node.objects.all())
        for state, n in counts.by_state.items():
            by_state.add_metric([state], n)
        for cluster, state, n in (
            Node.objects.values_list("cluster__name", "state")
            .annotate(n=Count("id"))
            .order_by("cluster__name", "state")
        ):
            by_cluster.add_metric([cluster or "", state], n)
        yield by_state
        yield by_cluster
        yield GaugeMetricFamily(
            "nodewarden_nodes_in_trouble",
            'Nodes in a state that needs work (the overview\'s "in trouble").',
            value=counts.in_trouble,
        )
        yield GaugeMetricFamily(
            "nodewarden_nodes_in_maintenance",
            "Nodes an operator took out for planned work (not counted in trouble).",
            value=counts.in_maintenance,
        )

    @staticmethod
    def _by_severity(name: str, documentation: str, queryset: QuerySet[Any]) -> Metric:
        family = GaugeMetricFamily(name, documentation, labels=["severity"])
        counts = dict(queryset.values_list("severity").annotate(n=Count("id")).order_by())
        for severity in Severity.values:
            family.add_metric([severity], counts.get(severity, 0))
        return family

    @staticmethod
    def _firing(now: datetime) -> Iterator[Metric]:
        """Firing alerts (silenced ones included, as on the overview) and the silenced among them."""
        counts = firing_counts(Alert.objects.all(), now)
        firing = GaugeMetricFamily(
            "nodewarden_alerts_firing", "Firing alerts (silenced included), by severity.", labels=["severity"]
        )
        silenced = GaugeMetricFamily(
            "nodewarden_alerts_firing_silenced", "Firing alerts silenced now, by severity.", labels=["severity"]
        )
        for severity in Severity.values:
            firing.add_metric([severity], counts.by_severity[severity])
            silenced.add_metric([severity], counts.silenced_by_severity[severity])
        yield firing
        yield silenced

    @staticmethod
    def _remediation() -> Iterator[Metric]:
        open_ = GaugeMetricFamily(
            "nodewarden_remediations_open", "Open remediations by status and rung.", labels=["status", "rung"]
        )
        for (status, rung), n in sorted(summary.open_by_status_and_rung(Remediation.objects.all()).items()):
            open_.add_metric([status, rung], n)
        yield open_
        # A counter: steps are never deleted, so the number of rungs tried only grows.
        actions = CounterMetricFamily(
            "nodewarden_remediation_actions", "Remediation actions taken (steps tried), by rung.", labels=["rung"]
        )
        counts = dict(RemediationStep.objects.values_list("rung").annotate(n=Count("id")).order_by())
        for rung in LADDER:
            actions.add_metric([rung], counts.get(rung, 0))
        yield actions

    @staticmethod
    def _queue_lengths() -> Metric | None:
        """LLEN of each Celery queue when the broker is Redis (kombu keeps a queue as a list named
        after it); None otherwise, or when Redis does not answer (logged)."""
        from nodewarden.celery import QUEUE_NAMES

        url = str(settings.CELERY_BROKER_URL)
        if not url.startswith(("redis://", "rediss://", "unix://")):
            return None
        import redis

        try:
            client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
            with client.pipeline(transaction=False) as pipe:
                for queue in QUEUE_NAMES:
                    pipe.llen(queue)
                lengths = pipe.execute()
            client.close()
        except redis.RedisError as exc:
            log.warning("metrics: Celery queue depths unavailable: %s", exc)
            return None
        family = GaugeMetricFamily(
            "nodewarden_celery_queue_length", "Messages waiting in each Celery queue.", labels=["queue"]
        )
        for queue, length in zip(QUEUE_NAMES, lengths, strict=True):
            family.add_metric([queue], length)
        return family

    @staticmethod
    def _ingest_rate(now: datetime) -> Metric:
        """Reports received in the last 5 minutes, per second. Read through the nodes that reported
        in that time (NodeHealth's index) and each one's recent reports (NodeReport's primary key)."""
        since = now - INGEST_WINDOW
        recent_nodes = NodeHealth.objects.filter(last_received_at__gte=since).values("node_id")
        received = NodeReport.objects.filter(
            node_id__in=recent_nodes,
            collected_at__gte=since - COLLECTION_LAG,
            received_at__gte=since,
            received_at__lte=now,
        ).count()
        return GaugeMetricFamily(
            "nodewarden_ingest_reports_per_second",
            "Agent reports received per second over the last 5 minutes.",
            value=received / INGEST_WINDOW.total_seconds(),
        )

    @staticmethod
    def _fabric_tickets() -> Metric:
        family = GaugeMetricFamily(
            "nodewarden_fabric_tickets_open", "Open InfiniBand fabric tickets by kind.", labels=["kind"]
        )
        counts = dict(
            Ticket.objects.filter(status=TicketStatus.OPEN).values_list("kind").annotate(n=Count("id")).order_by()
        )
        for kind in DiscrepancyKind.values:
            family.add_metric([kind], counts.get(kind, 0))
        return family

    @staticmethod
    def _audit() -> Iterator[Metric]:
        """The last finished fleet audit: breaches and unknown answers per invariant, and when it ran
        (alert on breaches > 0, and on a last run older than a few beat intervals)."""
        run = AuditRun.objects.filter(finished__isnull=False).only("finished", "counts").first()
        counts = run.counts if run is not None else {}
        breaches = GaugeMetricFamily(
            "nodewarden_audit_breaches", "Breaches found by the last fleet audit, by invariant.", labels=["invariant"]
        )
        unknown = GaugeMetricFamily(
            "nodewarden_audit_unknown",
            "Answers the last fleet audit could not get (scheduler or BMC unreachable), by invariant.",
            labels=["invariant"],
        )
        for invariant in Invariant.values:
            breaches.add_metric([invariant], counts.get(invariant, {}).get("breaches", 0))
            unknown.add_metric([invariant], counts.get(invariant, {}).get("unknown", 0))
        yield breaches
        yield unknown
        yield GaugeMetricFamily(
            "nodewarden_audit_last_run_timestamp_seconds",
            "When the last fleet audit finished (Unix time; 0: never).",
            value=run.finished.timestamp() if run is not None and run.finished is not None else 0,
        )

    @staticmethod
    def _check_coverage(now: datetime) -> Iterator[Metric]:
        """Idle-time validation: the share of production nodes whose every owed active check is
        fresh, fleet-wide, per cluster and per hardware profile, and the stale nodes per cluster and kind."""
        shares = freshness.fleet_coverage(now)  # counted in the database: no row per node here
        by_cluster = shares["cluster"]
        ratio = GaugeMetricFamily(
            "nodewarden_check_coverage_ratio",
            'Share of production nodes whose every owed active check is fresh, per cluster (cluster "": none).',
            labels=["cluster"],
        )
        stale = GaugeMetricFamily(
            "nodewarden_check_stale_nodes",
            "Production nodes whose active check of this kind is owed and not fresh, per cluster.",
            labels=["cluster", "kind"],
        )
        for share in by_cluster:
            ratio.add_metric([share.name], share.ratio)
            for kind in ACTIVE_KINDS:
                stale.add_metric([share.name, kind], share.stale_by_kind.get(kind, 0))
        profiles = GaugeMetricFamily(
            "nodewarden_check_profile_coverage_ratio",
            "Share of production nodes whose every owed active check is fresh, per hardware profile.",
            labels=["profile"],
        )
        for share in shares["profile"]:
            profiles.add_metric([share.name], share.ratio)
        fleet = shares["fleet"]
        yield GaugeMetricFamily(
            "nodewarden_check_fleet_coverage_ratio",
            "Share of all production nodes whose every owed active check is fresh (1 with no production node).",
            value=fleet[0].ratio if fleet else 1.0,
        )
        yield ratio
        yield stale
        yield profiles

    @staticmethod
    def _breakers() -> Metric:
        """1 for a cluster whose circuit breaker is tripped (automated actions stopped there), else 0."""
        tripped = Exists(CircuitBreaker.objects.filter(cluster=OuterRef("pk"), reset_at__isnull=True))
        family = GaugeMetricFamily(
            "nodewarden_remediation_breaker_tripped",
            "1 while the cluster's remediation circuit breaker is tripped, else 0.",
            labels=["cluster"],
        )
        for name, is_tripped in Cluster.objects.values_list("name", tripped).order_by("name"):
            family.add_metric([name], 1 if is_tripped else 0)
        return family

    @staticmethod
    def _alertmanager() -> Iterator[Metric]:
        """Pushes of alerts to each Alertmanager (health.alertmanager_push), counted by every worker."""
        pushes = CounterMetricFamily(
            "nodewarden_alertmanager_pushes", "POSTs of alerts Alertmanager accepted.", labels=["receiver"]
        )
        failures = CounterMetricFamily(
            "nodewarden_alertmanager_push_failures",
            "POSTs of alerts Alertmanager refused or did not answer (the next resend heals them).",
            labels=["receiver"],
        )
        last = GaugeMetricFamily(
            "nodewarden_alertmanager_last_success_timestamp_seconds",
            "When Alertmanager last accepted a push (Unix time; 0: never).",
            labels=["receiver"],
        )
        for row in AlertmanagerTally.objects.order_by("receiver")[:50]:
            pushes.add_metric([row.receiver], row.pushes)
            failures.add_metric([row.receiver], row.failures)
            last.add_metric([row.receiver], row.last_success_at.timestamp() if row.last_success_at else 0)
        yield pushes
        yield failures
        yield last


def registry(now: datetime | None = None) -> CollectorRegistry:
    """A registry of this scrape's own: the fleet collector alone (no process metrics of one web worker)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(now))
    return reg
