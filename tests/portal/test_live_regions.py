"""Live regions (nodewarden/live.py): a refresh asks for one region by id and gets only that fragment."""

from __future__ import annotations

import pytest
from django.urls import reverse

from health.choices import Severity
from health.services import raise_finding
from nodes.choices import NodeState
from remediation.choices import Rung, Status
from remediation.models import Remediation
from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db


def _refresh(client, url: str, region: str, params: dict | None = None):
    """What static/js/live.js asks for: htmx's request headers, the region's id as the target."""
    return client.get(url, params or {}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=region)


def _is_fragment(html: str, region: str) -> bool:
    return "<html" not in html and "<main" not in html and f'id="{region}"' in html


def test_the_node_list_refreshes_its_rows_only_and_keeps_its_filter(client, operator):
    NodeFactory(hostname="gpu-live-01", state=NodeState.PRODUCTION)
    NodeFactory(hostname="cpu-other-01", state=NodeState.PRODUCTION)
    client.force_login(operator)
    page = client.get(reverse("node-list"), {"q": "gpu-live"}).content.decode()
    assert 'id="node-rows" data-live hx-get="/nodes/?q=gpu-live"' in page and "data-live-status" in page

    html = _refresh(client, reverse("node-list"), "node-rows", {"q": "gpu-live"}).content.decode()
    assert _is_fragment(html, "node-rows") and html.lstrip().startswith("<tbody")
    assert "gpu-live-01" in html and "cpu-other-01" not in html
    assert 'form="node-bulk"' in html  # the rows still join the bulk form


def test_the_alert_list_refreshes_its_rows_only(client, operator):
    node = NodeFactory(hostname="gpu-alerting-01")
    raise_finding(node.pk, rule="xid", severity=Severity.CATASTROPHIC, summary="XID 79 fallen off the bus", xid=79)
    client.force_login(operator)
    html = _refresh(client, reverse("alert-list"), "alert-rows").content.decode()
    assert _is_fragment(html, "alert-rows") and "XID 79 fallen off the bus" in html and 'form="alert-bulk"' in html


def test_the_remediation_list_refreshes_its_rows_only(client, operator):
    node = NodeFactory(hostname="gpu-fixing-01", state=NodeState.REMEDIATING)
    Remediation.objects.create(node=node, status=Status.RUNNING, rung=Rung.POWER_CYCLE, decisions=[])
    client.force_login(operator)
    html = _refresh(client, reverse("remediation-overview"), "remediation-rows").content.decode()
    assert _is_fragment(html, "remediation-rows") and "gpu-fixing-01" in html
    assert "availability-chart" not in html


@pytest.mark.parametrize(
    ("region", "shows"), [("why-here", "Why here, since when, what next"), ("node-gpus", "GPU-LIVE-UUID")]
)
def test_the_node_page_refreshes_its_live_parts_only(client, operator, region, shows):
    node = NodeFactory(hostname="gpu-page-01", state=NodeState.PRODUCTION)
    GPUFactory(node=node, index=0, uuid="GPU-LIVE-UUID")
    client.force_login(operator)
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert f'id="{region}"' in page and "data-live-status" in page

    html = _refresh(client, reverse("node-detail", args=[node.pk]), region).content.decode()
    assert _is_fragment(html, region) and shows in html
    assert "timeline-chart" not in html and 'id="history' not in html


def test_a_refresh_of_a_node_one_may_not_see_is_a_404(client, customer, other_tenant):
    theirs = NodeFactory(tenant=other_tenant)
    client.force_login(customer)
    assert _refresh(client, reverse("node-detail", args=[theirs.pk]), "why-here").status_code == 404
