"""The two agent-less roads into health: a dcgm-exporter scraped over HTTP, and Alertmanager's webhook.

The exporter is a real HTTP server on 127.0.0.1 serving a captured dcgm-exporter
exposition (tests/telemetry/fixtures); the scrape runs through the Celery task function
itself. The webhook is posted over real HTTP to the live server with an operator's token.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone

from health.choices import AlertState, RecommendedAction, Severity
from health.models import Alert, Finding
from nodes.choices import EventKind
from nodes.models import NodeEvent
from telemetry.models import DcgmExporterTarget, GpuState, NodeHealth, NodeReport
from telemetry.tasks import scrape_dcgm_exporters
from tests.factories import NodeFactory

from .conftest import Portal

EXPOSITION = Path(__file__).resolve().parents[1] / "telemetry" / "fixtures" / "dcgm-exporter-hostname.txt"
EXPORTER_HOST = "ip-100-64-171-120.ec2.internal"  # the hostname label in the capture


class Exporter:
    """dcgm-exporter's /metrics endpoint: serves the capture as text/plain and counts the scrapes."""

    def __init__(self) -> None:
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                exporter.scrapes += 1
                body = EXPOSITION.read_bytes()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    running = Exporter()
    thread = threading.Thread(target=running.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.mark.django_db(transaction=True)
def test_the_scrape_task_turns_an_exporters_metrics_into_gpu_state_and_an_xid_79_finding(exporter):
    node = NodeFactory(hostname=EXPORTER_HOST, production=True)
    target = DcgmExporterTarget.objects.create(url=exporter.url)

    outcome = scrape_dcgm_exporters()

    assert outcome == {"scraped": 1, "failed": 0} and exporter.scrapes == 1
    assert DcgmExporterTarget.objects.get(pk=target.pk).last_error == ""
    assert NodeHealth.objects.get(node=node).source == "dcgm-exporter"
    gpus = {g.index: g for g in GpuState.objects.filter(node=node)}
    assert sorted(gpus) == [0, 6]
    assert (gpus[0].temperature_c, gpus[0].pci_bus_id) == (26.0, "00000000:53:00.0")
    assert gpus[6].xid_gauge == 79
    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.xid, finding.gpu_index, finding.source) == (79, 6, "dcgm-exporter")
    assert (finding.severity, finding.recommended_action) == (Severity.CATASTROPHIC, RecommendedAction.REBOOT)
    assert finding.alert.state == AlertState.FIRING
    assert NodeEvent.objects.filter(pk=finding.event_id, kind=EventKind.FINDING).exists()

    DcgmExporterTarget.objects.filter(pk=target.pk).update(last_scraped_at=timezone.now() - timedelta(minutes=5))
    assert scrape_dcgm_exporters() == {"scraped": 1, "failed": 0}

    assert NodeReport.objects.filter(node=node).count() == 2
    assert Finding.objects.filter(node=node, rule="xid").count() == 1, "the gauge still says 79: no new XID"


def _webhook(status: str, hostname: str) -> dict:
    """Alertmanager's webhook (version 4) for one node-exporter alert."""
    alert = {
        "status": status,
        "labels": {
            "alertname": "NodePsuFailed",
            "instance": f"{hostname}:9100",
            "job": "node-exporter",
            "severity": "page",
        },
        "annotations": {"summary": "Power supply 2 has failed."},
        "startsAt": "2026-03-02T11:58:30.123Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-03-02T12:30:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=ipmi_power_supply_state",
        "fingerprint": "5e8a1f0c2b7d9e34",
    }
    return {
        "version": "4",
        "groupKey": '{}:{alertname="NodePsuFailed"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "nodewarden",
        "groupLabels": {"alertname": "NodePsuFailed"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [alert],
    }


@pytest.mark.django_db(transaction=True)
def test_an_alertmanager_webhook_over_http_opens_an_alert_and_the_resolved_one_closes_it(live_server, operator):
    node = NodeFactory(hostname="gpu-am-07.dc1.example.com", production=True)
    portal = Portal(live_server.url, operator)

    status, answer = portal.post("/api/ingest/alertmanager/", _webhook("firing", node.hostname))

    assert status == 200 and answer == {"accepted": 1, "resolved": 0, "unmatched": []}
    finding = Finding.objects.get(node=node)
    assert (finding.rule, finding.severity, finding.source) == ("alertmanager", Severity.CATASTROPHIC, "alertmanager")
    assert finding.summary == "NodePsuFailed: Power supply 2 has failed."
    assert finding.actor_name == operator.username
    alert = Alert.objects.get(node=node)
    assert alert.state == AlertState.FIRING

    status, answer = portal.post("/api/ingest/alertmanager/", _webhook("resolved", node.hostname))

    assert status == 200 and answer == {"accepted": 0, "resolved": 1, "unmatched": []}
    alert.refresh_from_db()
    assert (alert.state, alert.resolved_reason) == (AlertState.RESOLVED, "resolved in Alertmanager")
    assert Finding.objects.filter(node=node).count() == 1
    assert NodeEvent.objects.filter(node=node, kind=EventKind.NOTE, details__alert_id=alert.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_the_webhook_is_refused_without_a_token_and_stores_nothing(live_server, operator):
    node = NodeFactory(hostname="gpu-am-08.dc1.example.com", production=True)
    portal = Portal(live_server.url, operator)
    portal.token = "0" * 40  # not a token of anyone

    status, answer = portal.post("/api/ingest/alertmanager/", _webhook("firing", node.hostname))

    assert status == 401 and "detail" in answer
    assert not Finding.objects.exists() and not Alert.objects.exists()
