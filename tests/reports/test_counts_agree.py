"""The same concept shows the same number everywhere: the overview (and its htmx tiles), the
remediation page, the alert list and /metrics, read on one dataset. Each page marks its counts with
an element id and ``data-count``; /metrics is parsed with prometheus_client's parser."""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from health.models import Alert
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def dataset(settings):
    settings.NODEWARDEN_METRICS_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]
    now = timezone.now()
    prod = [NodeFactory(state="production") for _ in range(2)]
    NodeFactory(state="drain_pending")  # an operator's drain: in trouble, no alert
    triage = NodeFactory(state="triage")
    remediating = [NodeFactory(state="remediating") for _ in range(2)]
    repair = NodeFactory(state="repair")
    for i, (node, severity, extra) in enumerate(
        (
            (triage, "catastrophic", {}),
            (remediating[0], "warning", {"acknowledged_at": now}),
            (remediating[1], "degraded", {"silenced_until": now + timedelta(hours=1)}),
            (prod[0], "warning", {"silenced_until": now - timedelta(hours=1)}),  # the silence ran out
            (prod[1], "catastrophic", {"state": "resolved"}),
        )
    ):
        Alert.objects.create(
            node=node, rule="xid", dedupe_key=f"xid|{i}", severity=severity, summary="s", **{"state": "firing", **extra}
        )
    # Open records: one whose node is in Remediation, one whose node is still in triage.
    Remediation.objects.create(node=remediating[0], status=Status.RUNNING, rung=Rung.REBOOT, urgency=Urgency.NOW)
    Remediation.objects.create(node=triage, status=Status.QUEUED, rung=Rung.REBOOT, urgency=Urgency.NOW)
    Remediation.objects.create(node=prod[0], status=Status.SUCCEEDED, rung=Rung.REBOOT, urgency=Urgency.NOW)
    Remediation.objects.create(node=repair, status=Status.HANDED_OFF, rung=Rung.RMA, urgency=Urgency.NOW)


def marked(client, url: str) -> dict[str, dict[str, str]]:
    """Every element with an id and data-count on the page: id -> its data-* attributes."""
    response = client.get(url)
    assert response.status_code == 200, url
    found: dict[str, dict[str, str]] = {}
    for tag in re.findall(r"<[a-z]+\s[^>]*data-count=[^>]*>", response.content.decode()):
        attrs = dict(re.findall(r'([a-z-]+)="([^"]*)"', tag))
        key = attrs.get("id") or (f"state:{attrs['data-state']}" if "data-state" in attrs else None)
        if key:
            found[key] = attrs
    return found


def metrics(client) -> dict[str, dict[tuple[tuple[str, str], ...], int]]:
    text = client.get("/metrics").content.decode()
    return {
        f.name: {tuple(sorted(s.labels.items())): int(s.value) for s in f.samples if s.name == f.name}
        for f in text_string_to_metric_families(text)
    }


def test_every_page_shows_the_same_number_for_the_same_concept(client, operator, dataset):
    client.force_login(operator)
    overview = marked(client, "/")
    alert_tiles = marked(client, "/alerts/summary/")
    remediation_tiles = marked(client, "/remediation/summary/")
    remediation_page = marked(client, "/remediation/")
    alert_list = marked(client, "/alerts/")
    scraped = metrics(client)

    # Firing alerts: silenced and acknowledged included, everywhere; the silenced among them said.
    firing = sum(scraped["nodewarden_alerts_firing"].values())
    silenced = sum(scraped["nodewarden_alerts_firing_silenced"].values())
    assert (firing, silenced) == (4, 1)
    for page in (alert_tiles, alert_list):
        assert page["firing-alerts"]["data-count"] == str(firing)
        assert page["firing-alerts"]["data-silenced"] == str(silenced)

    # Nodes in trouble (drain pending, triage, remediating x2, repair) and nodes per state.
    in_trouble = scraped["nodewarden_nodes_in_trouble"][()]
    assert in_trouble == 5
    assert overview["nodes-in-trouble"]["data-count"] == "5"
    for ((_, state),), n in scraped["nodewarden_nodes"].items():
        assert overview[f"state:{state}"]["data-count"] == str(n)

    # Open remediation records vs nodes in the Remediation state: two concepts, each the same everywhere.
    open_records = sum(scraped["nodewarden_remediations_open"].values())
    in_state = scraped["nodewarden_nodes"][(("state", "remediating"),)]
    assert (open_records, in_state) == (2, 2)
    for page in (remediation_tiles, remediation_page):
        assert page["open-remediations-count"]["data-count"] == "2"
        assert page["nodes-in-remediation-state"]["data-count"] == "2"
