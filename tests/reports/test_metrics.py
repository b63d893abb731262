"""GET /metrics: the Prometheus text format (parsed with prometheus_client's own parser), the
values on built data, who may scrape, and a query count that does not grow with the fleet."""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from fabric.models import Ticket
from fleet.models import Cluster
from health.models import Alert, Finding
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import CircuitBreaker, Remediation, RemediationStep
from telemetry.models import NodeHealth, NodeReport
from tests.conftest import require_service
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db
TOKEN = "s3cret-scraper-token"


@pytest.fixture(autouse=True)
def scrape_network(settings):
    """The test client (127.0.0.1) scrapes from a configured scrape network unless a test says otherwise."""
    settings.NODEWARDEN_METRICS_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]


def scrape(client, **headers):
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.content.decode())}


def values(family):
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def one(family, **labels):
    return values(family)[tuple(sorted(labels.items()))]


@pytest.fixture
def fleet(db):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    prod = [NodeFactory(cluster=east, state="production") for _ in range(3)]
    triage = NodeFactory(cluster=west, state="triage")
    NodeFactory(cluster=None, site=east.site, state="enrolled")
    now = timezone.now()
    for node, severity, state in (
        (prod[0], "catastrophic", "firing"),
        (prod[1], "warning", "firing"),
        (prod[2], "warning", "resolved"),
        (triage, "catastrophic", "firing"),
    ):
        alert = Alert.objects.create(
            node=node, rule="xid", dedupe_key=f"xid|{node.pk}", severity=severity, summary="s", state=state
        )
        Finding.objects.create(
            node=node, hostname=node.hostname, rule="xid", severity=severity, summary="s", alert=alert
        )
    Finding.objects.create(
        node=prod[0],
        hostname="x",
        rule="xid",
        severity="degraded",
        summary="s",
        shadow=True,
        alert=Alert.objects.filter(node=prod[0]).first(),
    )
    rem = Remediation.objects.create(node=triage, status=Status.RUNNING, rung=Rung.POWER_CYCLE, urgency=Urgency.NOW)
    for rung in (Rung.GPU_RESET, Rung.REBOOT, Rung.POWER_CYCLE):
        RemediationStep.objects.create(remediation=rem, rung=rung, status=StepStatus.FAILED, deadline=now)
    done = Remediation.objects.create(node=prod[0], status=Status.SUCCEEDED, rung=Rung.REBOOT, urgency=Urgency.NOW)
    RemediationStep.objects.create(remediation=done, rung=Rung.REBOOT, status=StepStatus.PASSED, deadline=now)
    Ticket.objects.create(key="a", kind="link_down", title="t")
    Ticket.objects.create(key="b", kind="link_down", title="t")
    Ticket.objects.create(key="c", kind="miswired", title="t", status="closed")
    for i, node in enumerate(prod[:2]):
        NodeHealth.objects.create(node=node, last_report_at=now, last_received_at=now)
        for k in range(30):  # 30 reports each in the last 5 minutes, 10 more before it
            at = now - timedelta(seconds=10 * k)
            NodeReport.objects.create(node=node, collected_at=at, report_id=f"{i}-{k}", received_at=at)
        for k in range(10):
            at = now - timedelta(minutes=6 + k)
            NodeReport.objects.create(node=node, collected_at=at, report_id=f"{i}-old-{k}", received_at=at)
    return east


def test_it_counts_nodes_by_state_and_by_cluster(client, fleet):
    metrics = scrape(client)
    nodes = metrics["nodewarden_nodes"]
    assert nodes.type == "gauge"
    assert (
        one(nodes, state="production"),
        one(nodes, state="triage"),
        one(nodes, state="enrolled"),
        one(nodes, state="rma"),
    ) == (3, 1, 1, 0)
    by_cluster = values(metrics["nodewarden_cluster_nodes"])
    assert by_cluster == {
        (("cluster", "east"), ("state", "production")): 3,
        (("cluster", "west"), ("state", "triage")): 1,
        (("cluster", ""), ("state", "enrolled")): 1,
    }


def test_it_counts_findings_alerts_remediations_and_actions(client, fleet):
    metrics = scrape(client)
    assert values(metrics["nodewarden_findings_open"]) == {
        (("severity", "catastrophic"),): 2,
        (("severity", "degraded"),): 0,
        (("severity", "warning"),): 1,
        (("severity", "info"),): 0,
    }
    firing = metrics["nodewarden_alerts_firing"]
    assert (one(firing, severity="catastrophic"), one(firing, severity="warning")) == (2, 1)
    assert values(metrics["nodewarden_remediations_open"]) == {(("rung", "power_cycle"), ("status", "running")): 1}
    actions = metrics["nodewarden_remediation_actions"]
    assert actions.type == "counter"
    assert {s.labels["rung"]: s.value for s in actions.samples if s.name.endswith("_total")} == {
        "gpu_reset": 1,
        "reboot": 2,
        "power_cycle": 1,
        "reimage": 0,
        "repair": 0,
        "rma": 0,
    }
    tickets = metrics["nodewarden_fabric_tickets_open"]
    assert (one(tickets, kind="link_down"), one(tickets, kind="miswired")) == (2, 0)


def test_a_tripped_breaker_is_one_for_its_cluster_until_reset(client, fleet):
    east = fleet  # the fixture returns the "east" cluster
    CircuitBreaker.objects.create(cluster=east, reason="findings spiked")
    CircuitBreaker.objects.create(
        cluster=Cluster.objects.get(name="west"), reason="earlier", reset_at=timezone.now(), reset_by="alice"
    )
    assert values(scrape(client)["nodewarden_remediation_breaker_tripped"]) == {
        (("cluster", "east"),): 1,
        (("cluster", "west"),): 0,
    }


def test_the_ingest_rate_is_reports_of_the_last_five_minutes_per_second(client, fleet):
    rate = scrape(client)["nodewarden_ingest_reports_per_second"]
    assert rate.samples[0].value == pytest.approx(60 / 300)


def test_queue_depths_are_absent_without_a_redis_broker(client, fleet, settings):
    settings.CELERY_BROKER_URL = "filesystem://"
    assert "nodewarden_celery_queue_length" not in scrape(client)


@pytest.mark.redis
def test_queue_depths_are_the_length_of_each_celery_queue(client, fleet, settings):
    base = require_service("REDIS_URL", "Redis")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") else 0
    url = urlunsplit(urlsplit(base)._replace(path=f"/{4 + index % 4}"))  # 8-15 are tests/infra's
    settings.CELERY_BROKER_URL = url
    r = redis.Redis.from_url(url)
    r.delete("default", "provisioning", "validation", "remediation")
    r.rpush("remediation", "a", "b", "c")
    r.rpush("default", "x")
    try:
        depths = values(scrape(client)["nodewarden_celery_queue_length"])
    finally:
        r.delete("default", "remediation")
    assert depths == {
        (("queue", "default"),): 1,
        (("queue", "provisioning"),): 0,
        (("queue", "validation"),): 0,
        (("queue", "remediation"),): 3,
    }


def test_a_broker_that_does_not_answer_leaves_the_queue_depths_out(client, fleet, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    assert "nodewarden_celery_queue_length" not in scrape(client)


# --- Who may scrape -------------------------------------------------------------------------------


def test_with_a_token_set_a_scraper_outside_the_networks_needs_it(client, fleet, settings):
    settings.NODEWARDEN_METRICS_TOKEN = TOKEN
    settings.NODEWARDEN_METRICS_NETWORKS = []
    assert client.get("/metrics").status_code == 401  # the loopback does not suffice
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert "nodewarden_nodes" in scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def test_the_loopback_is_no_scrape_network_unless_configured(client, fleet, settings, viewer, customer):
    """Behind a reverse proxy on the same host every client is the loopback: it must not be trusted by default."""
    settings.NODEWARDEN_METRICS_TOKEN = ""
    settings.NODEWARDEN_METRICS_NETWORKS = []
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    client.force_login(customer)
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    client.force_login(viewer)
    assert "nodewarden_nodes" in scrape(client, REMOTE_ADDR="10.1.2.3")


def test_a_client_in_a_configured_scrape_network_needs_no_token(client, fleet, settings):
    settings.NODEWARDEN_METRICS_TOKEN = TOKEN
    settings.NODEWARDEN_METRICS_NETWORKS = [ipaddress.ip_network("10.9.0.0/16")]
    assert "nodewarden_nodes" in scrape(client, REMOTE_ADDR="10.9.3.4")
    assert client.get("/metrics", REMOTE_ADDR="10.8.3.4").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


def test_behind_a_trusted_proxy_the_forwarded_address_is_judged(client, fleet, settings):
    settings.NODEWARDEN_METRICS_TOKEN = ""
    settings.NODEWARDEN_METRICS_NETWORKS = [ipaddress.ip_network("10.9.0.0/16")]
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    # The proxy (127.0.0.1) appends the address it saw; what a client wrote before it is ignored.
    forwarded = {"REMOTE_ADDR": "127.0.0.1"}
    assert "nodewarden_nodes" in scrape(client, HTTP_X_FORWARDED_FOR="10.9.3.4", **forwarded)
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.3.4, 203.0.113.7", **forwarded).status_code == 403
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 0}
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.3.4", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_metrics_token_guessing_is_throttled(client, fleet, settings):
    settings.NODEWARDEN_METRICS_TOKEN = TOKEN
    settings.NODEWARDEN_METRICS_NETWORKS = []
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"auth_failure": "3/min"}}
    for _ in range(3):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer guess").status_code == 401
    locked = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", REMOTE_ADDR="10.1.2.3").status_code == 200


# --- Cost -----------------------------------------------------------------------------------------


def _scrape_queries(client):
    with CaptureQueriesContext(connection) as ctx:
        scrape(client)
    return len(ctx.captured_queries)


def test_a_scrape_costs_the_same_queries_for_10_and_for_200_nodes(client, settings):
    settings.CELERY_BROKER_URL = "filesystem://"
    clusters = [ClusterFactory() for _ in range(4)]
    states = ["production", "triage", "remediating", "repair", "burn_in"]

    def grow(n):
        for i in range(n):
            node = NodeFactory(cluster=clusters[i % 4], state=states[i % 5])
            alert = Alert.objects.create(node=node, rule="xid", dedupe_key="k", severity="warning", summary="s")
            Finding.objects.create(
                node=node, hostname=node.hostname, rule="xid", severity="warning", summary="s", alert=alert
            )
            Remediation.objects.create(node=node, status=Status.QUEUED, rung=Rung.REBOOT, urgency=Urgency.NOW)

    grow(10)
    small = _scrape_queries(client)
    grow(190)
    # 9 (nodes per state from nodes.counts, as the overview reads them, and per cluster), 3 for the
    # check coverage (nodes, targets, last passes), 1 for the breakers per cluster and 1 for the
    # Alertmanager pushes.
    assert _scrape_queries(client) == small <= 14
