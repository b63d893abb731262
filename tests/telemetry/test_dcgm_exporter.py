"""dcgm-exporter: parsing its exposition, the push endpoint and the scrape task."""

from __future__ import annotations

import http.server
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from telemetry import dcgm_exporter
from telemetry.dcgm_exporter import ExpositionError, parse_exposition, to_report
from telemetry.models import DcgmExporterTarget, GpuSample, GpuState, IngestRejection, NodeHealth, XidRecord
from telemetry.tasks import scrape_dcgm_exporters
from tests.factories import NodeFactory

from .conftest import T0

FIXTURES = Path(__file__).parent / "fixtures"
HOST = "ip-100-64-171-120.ec2.internal"
PUSH_URL = "/api/ingest/dcgm-exporter/"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name", ["dcgm-exporter-Hostname.txt", "dcgm-exporter-hostname.txt"])
def test_it_reads_the_host_from_either_label_case(name):
    hosts = parse_exposition(fixture(name))
    assert list(hosts) == [HOST]
    assert sorted(hosts[HOST].gpus) == [0, 6]


def test_it_maps_dcgm_fields_to_the_report_schema():
    report = to_report(parse_exposition(fixture("dcgm-exporter-Hostname.txt"))[HOST], collected_at=T0, previous_xids={})
    gpu0, gpu6 = report.gpus
    assert (gpu0.index, gpu0.uuid, gpu0.pci_bus_id) == (
        0,
        "GPU-22dbdd79-f55a-92a8-aa39-322198e72ed6",
        "00000000:53:00.0",
    )
    assert gpu0.name == "NVIDIA H100 80GB HBM3" and report.driver_version == "580.105.08"
    assert (gpu0.temperature_c, gpu0.power_w, gpu0.sm_clock_mhz) == (26.0, 67.268, 1980)
    assert (gpu6.utilization_pct, gpu6.memory_used_mib, gpu6.pcie_replay_count) == (87.0, 74215, 2)
    assert gpu6.remapped_rows_uncorrectable == 3 and gpu6.remapped_rows_failure is True
    assert gpu0.remapped_rows_failure is False


def test_the_not_supported_sentinel_becomes_none_not_a_huge_number():
    report = to_report(parse_exposition(fixture("dcgm-exporter-Hostname.txt"))[HOST], collected_at=T0, previous_xids={})
    assert report.gpus[0].hbm_temperature_c is None
    assert report.gpus[1].hbm_temperature_c == 35.0


def test_the_xid_gauge_becomes_an_event_only_when_it_changes():
    metrics = parse_exposition(fixture("dcgm-exporter-hostname.txt"))[HOST]
    first = to_report(metrics, collected_at=T0, previous_xids={})
    assert [(e.xid, e.pci_bus_id) for e in first.xid_events] == [(79, "00000000:B9:00.0")]
    assert first.xid_events[0].message == "DCGM_FI_DEV_XID_ERRORS gauge changed to 79"
    assert first.xid_events[0].raw.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="6"')
    assert to_report(metrics, collected_at=T0, previous_xids={0: 0, 6: 79}).xid_events == []
    assert [e.xid for e in to_report(metrics, collected_at=T0, previous_xids={6: 48}).xid_events] == [79]


def test_it_refuses_text_that_is_not_an_exposition():
    with pytest.raises(ExpositionError, match="Not a Prometheus text exposition"):
        parse_exposition('DCGM_FI_DEV_GPU_TEMP{gpu="0" 26\n')


def test_it_refuses_a_value_the_report_schema_does_not_allow():
    text = fixture("dcgm-exporter-hostname.txt").replace("} 26\n", "} 900\n")
    with pytest.raises(ExpositionError, match=r"temperature_c"):
        to_report(parse_exposition(text)[HOST], collected_at=T0, previous_xids={})


# --- Push ------------------------------------------------------------------------------
@pytest.fixture
def host_node(db):
    return NodeFactory(hostname=HOST)


@pytest.fixture
def pusher(operator):
    client = Client()
    client.defaults["HTTP_AUTHORIZATION"] = f"Token {Token.objects.create(user=operator).key}"
    return client


def push(client: Client, text: str, content_type: str = "text/plain"):
    return client.post(PUSH_URL, text.encode(), content_type=content_type)


def test_a_push_stores_the_host_as_a_dcgm_exporter_report(pusher, host_node):
    response = push(pusher, fixture("dcgm-exporter-Hostname.txt"))
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 1, "duplicates": 0, "hosts": [HOST], "unknown_hosts": []}
    health = NodeHealth.objects.get(node=host_node)
    assert (health.source, health.gpu_count, health.driver_version) == ("dcgm-exporter", 2, "580.105.08")
    assert GpuSample.objects.filter(node=host_node).count() == 2
    assert GpuState.objects.get(node=host_node, index=6).xid_gauge == 79
    assert XidRecord.objects.get(node=host_node).gpu_index == 6


def test_pushing_the_same_gauge_again_records_no_second_xid(pusher, host_node):
    push(pusher, fixture("dcgm-exporter-hostname.txt"))
    push(pusher, fixture("dcgm-exporter-hostname.txt"))
    assert XidRecord.objects.filter(node=host_node).count() == 1
    push(pusher, fixture("dcgm-exporter-hostname.txt").replace("} 79\n", "} 94\n"))
    assert sorted(XidRecord.objects.filter(node=host_node).values_list("xid", flat=True)) == [79, 94]


def test_unknown_hosts_are_reported_back_and_recorded(pusher, db):
    response = push(pusher, fixture("dcgm-exporter-hostname.txt"))
    assert response.status_code == 200
    assert response.json()["unknown_hosts"] == [HOST] and response.json()["accepted"] == 0
    rejection = IngestRejection.objects.get()
    assert HOST in rejection.reason and rejection.source == "dcgm-exporter"


def test_a_malformed_push_is_refused_with_400_and_stores_nothing(pusher, host_node):
    text = fixture("dcgm-exporter-hostname.txt").replace("} 26\n", "} 900\n")
    response = push(pusher, text)
    assert response.status_code == 400
    assert "temperature_c" in response.json()["detail"]
    assert not NodeHealth.objects.exists() and not GpuSample.objects.exists()
    assert IngestRejection.objects.get().status == 400


def test_a_push_must_be_text_plain(pusher, host_node):
    response = push(pusher, fixture("dcgm-exporter-hostname.txt"), content_type="application/json")
    assert response.status_code == 415


def test_only_operators_may_push(viewer, host_node):
    anonymous = push(Client(), fixture("dcgm-exporter-hostname.txt"))
    assert anonymous.status_code in (401, 403)
    client = Client()
    client.force_login(viewer)
    assert push(client, fixture("dcgm-exporter-hostname.txt")).status_code == 403
    assert not NodeHealth.objects.exists()


# --- Scrape ----------------------------------------------------------------------------
@pytest.fixture
def exporter():
    """A real HTTP server on 127.0.0.1 serving the fixture as dcgm-exporter serves /metrics."""
    body = fixture("dcgm-exporter-Hostname.txt").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_scrape_task_ingests_every_due_target(exporter, host_node):
    target = DcgmExporterTarget.objects.create(url=f"{exporter}/metrics")
    assert scrape_dcgm_exporters() == {"scraped": 1, "failed": 0}
    target.refresh_from_db()
    assert target.last_scraped_at is not None and target.last_error == ""
    assert NodeHealth.objects.get(node=host_node).source == "dcgm-exporter"
    assert GpuSample.objects.filter(node=host_node).count() == 2


def test_a_target_scraped_recently_is_not_due(exporter, host_node):
    DcgmExporterTarget.objects.create(url=f"{exporter}/metrics", last_scraped_at=timezone.now(), interval_s=30)
    DcgmExporterTarget.objects.create(url=f"{exporter}/disabled", enabled=False)
    assert scrape_dcgm_exporters() == {"scraped": 0, "failed": 0}


def test_a_failing_target_records_its_error(exporter, db):
    target = DcgmExporterTarget.objects.create(
        url=f"{exporter}/nope", last_scraped_at=timezone.now() - timedelta(minutes=5)
    )
    assert scrape_dcgm_exporters() == {"scraped": 1, "failed": 1}
    target.refresh_from_db()
    assert "404" in target.last_error
    assert IngestRejection.objects.get().source == "dcgm-scrape"


def test_scraping_uses_the_targets_host_when_the_exporter_sends_no_host_label(exporter, db):
    text = fixture("dcgm-exporter-Hostname.txt").replace(f',Hostname="{HOST}"', "")
    node = NodeFactory(hostname="127.0.0.1")
    outcome = dcgm_exporter.ingest_exposition(text, default_host="127.0.0.1")
    assert outcome.hosts == ["127.0.0.1"] and NodeHealth.objects.get(node=node).gpu_count == 2


def test_a_push_with_a_nul_character_is_refused_with_400(pusher, host_node):
    text = fixture("dcgm-exporter-hostname.txt").replace('modelName="', 'modelName="\x00', 1)
    response = push(pusher, text)
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
    assert not NodeHealth.objects.exists()
