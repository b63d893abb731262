"""The portal pages: overview, list, detail, actions, scoping and query counts."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from nodes import services
from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from tests.factories import ClusterFactory, GPUFactory, NodeFactory

S = NodeState
pytestmark = pytest.mark.django_db


def _figure(response, element_id: str) -> dict:
    html = response.content.decode()
    start = html.index(f'id="{element_id}"')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def test_pages_need_a_login(client):
    for url in (reverse("fleet-overview"), reverse("node-list"), reverse("node-export")):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_login_page_works(client, operator):
    response = client.post(reverse("login"), {"username": "operator", "password": "password"})
    assert response.status_code == 302 and response["Location"] == reverse("fleet-overview")


def test_overview_counts_nodes_by_state_and_cluster(client, operator):
    cluster = ClusterFactory(name="c-east")
    NodeFactory.create_batch(3, cluster=cluster, state=S.PRODUCTION)
    NodeFactory(cluster=cluster, state=S.TRIAGE)
    client.force_login(operator)
    response = client.get(reverse("fleet-overview"))
    assert response.status_code == 200
    tiles = {t["state"]: t["count"] for t in response.context["tiles"]}
    assert tiles[S.PRODUCTION] == 3 and tiles[S.TRIAGE] == 1 and tiles[S.RMA] == 0
    assert response.context["in_trouble"] == 1
    (row,) = response.context["by_cluster"]
    assert row["cluster"] == "c-east" and row["total"] == 4 and row["trouble"] == 1
    assert f'href="{reverse("node-list")}?state=production"' in response.content.decode()


def test_overview_partial_refresh_returns_only_the_live_part(client, operator):
    NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    response = client.get(reverse("fleet-overview"), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b"<html" not in response.content and b"tile" in response.content


def test_overview_chart_plots_snapshots(client, operator):
    from nodes.tasks import snapshot_state_counts

    NodeFactory.create_batch(2, state=S.PRODUCTION)
    snapshot_state_counts()
    client.force_login(operator)
    fig = _figure(client.get(reverse("fleet-overview")), "counts-chart-data")
    (trace,) = fig["data"]
    assert trace["name"] == "Production" and trace["y"] == [2]


def test_node_list_searches_hostname_serial_gpu_uuid_and_bmc(client, operator):
    a = NodeFactory(hostname="gpu-a-001", serial="SERIAL-A", bmc_address="10.9.9.9")
    b = NodeFactory(hostname="gpu-b-002")
    GPUFactory(node=b, uuid="GPU-deadbeef-0000-0000-0000-000000000001")
    client.force_login(operator)
    for query, expected in (
        ("gpu-a", a),
        ("SERIAL-A", a),
        ("10.9.9.9", a),
        ("GPU-deadbeef-0000-0000-0000-000000000001", b),
    ):
        page = client.get(reverse("node-list"), {"q": query}).context["page"]
        assert list(page.object_list) == [expected], query


def test_node_list_filters_sorts_and_paginates(client, operator):
    NodeFactory.create_batch(55, state=S.PRODUCTION)
    NodeFactory(state=S.TRIAGE, hostname="zz-broken")
    client.force_login(operator)
    page = client.get(reverse("node-list"), {"state": "triage"}).context["page"]
    assert [n.hostname for n in page.object_list] == ["zz-broken"]
    page = client.get(reverse("node-list"), {"ordering": "-hostname"}).context["page"]
    assert page.object_list[0].hostname == "zz-broken"
    response = client.get(reverse("node-list"), {"state": "production", "page": 2})
    assert len(response.context["page"].object_list) == 5
    assert 'href="?state=production&page=1"' in response.content.decode()


def test_empty_form_fields_mean_any(client, operator):
    NodeFactory(hostname="only-one", state=S.TRIAGE)
    NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    response = client.get(reverse("node-list") + "?q=only&state=&site=&cluster=&tenant=&hardware_profile=")
    assert [n.hostname for n in response.context["page"].object_list] == ["only-one"]


def test_node_list_shows_bad_filters_as_an_error_not_a_crash(client, operator):
    client.force_login(operator)
    response = client.get(reverse("node-list"), {"state": "exploded", "site": "nowhere"})
    assert response.status_code == 200 and "Invalid filter" in response.content.decode()
    assert client.get(reverse("node-export"), {"state": "exploded"}).status_code == 400


def test_csv_export_follows_the_current_filters(client, operator):
    NodeFactory(hostname="keep-me", state=S.TRIAGE)
    NodeFactory(hostname="not-me", state=S.PRODUCTION)
    client.force_login(operator)
    response = client.get(reverse("node-export"), {"state": "triage"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][0] == "hostname" and [r[0] for r in rows[1:]] == ["keep-me"]


def test_node_detail_shows_state_inventory_buttons_charts_and_history(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    GPUFactory(node=node, index=0)
    services.request_drain(node.pk, actor=services.Actor(user=operator), reason="XID 48 double-bit ECC")
    client.force_login(operator)
    response = client.get(reverse("node-detail", args=[node.pk]))
    html = response.content.decode()
    assert response.status_code == 200 and "XID 48 double-bit ECC" in html
    assert {t["name"] for t in response.context["transitions"]} == {"cancel_drain", "start_draining", "cordon"}
    assert 'data-transition="cordon"' in html
    graph = _figure(response, "graph-chart-data")
    taken = [a for a in graph["layout"]["annotations"] if a["arrowcolor"] == "#1f5fbf"]
    assert [a["name"] for a in taken] == ["production->drain_pending"]
    timeline = _figure(response, "timeline-chart-data")
    assert {t["name"] for t in timeline["data"]} == {"Production", "Drain pending"}


def test_a_transition_from_the_node_page_changes_state_and_records_who_and_why(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    response = client.post(reverse("node-transition", args=[node.pk, "cordon"]), {"reason": "XID 79"})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.state == S.TRIAGE
    event = NodeEvent.objects.get(node=node)
    assert (event.actor, event.reason, event.transition) == (operator, "XID 79", "cordon")


def test_a_transition_without_reason_or_not_allowed_changes_nothing(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    client.post(reverse("node-transition", args=[node.pk, "cordon"]), {"reason": ""})
    response = client.post(reverse("node-transition", args=[node.pk, "send_to_rma"]), {"reason": "x"}, follow=True)
    assert "Cannot send to rma a node in state &#x27;Production&#x27;" in response.content.decode()
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


@pytest.mark.parametrize("view", ["node-transition", "node-note"])
def test_a_reason_with_a_nul_character_is_refused_with_a_message_not_a_500(client, operator, view):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    args = [node.pk, "cordon"] if view == "node-transition" else [node.pk]
    response = client.post(reverse(view, args=args), {"reason": "XID\x0079"}, follow=True)
    assert response.status_code == 200
    assert "NUL" in response.content.decode()
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


def test_viewers_see_no_buttons_and_cannot_post(client, viewer):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(viewer)
    assert client.get(reverse("node-detail", args=[node.pk])).context["transitions"] == []
    assert client.post(reverse("node-transition", args=[node.pk, "cordon"]), {"reason": "x"}).status_code == 403
    assert client.post(reverse("node-note", args=[node.pk]), {"reason": "x"}).status_code == 403
    assert not NodeEvent.objects.exists()


def test_operators_add_notes_to_history(client, operator):
    node = NodeFactory(state=S.TRIAGE)
    client.force_login(operator)
    client.post(reverse("node-note", args=[node.pk]), {"reason": "reseated GPU 3"})
    event = NodeEvent.objects.get(node=node)
    assert event.kind == EventKind.NOTE and event.reason == "reseated GPU 3" and event.target_state == ""


def test_customers_see_only_their_tenant_everywhere(client, customer, tenant, other_tenant):
    mine = NodeFactory(tenant=tenant, hostname="acme-1", state=S.PRODUCTION)
    theirs = NodeFactory(tenant=other_tenant, hostname="globex-1", state=S.TRIAGE)
    NodeFactory(tenant=None, hostname="spare-1")
    client.force_login(customer)
    overview = client.get(reverse("fleet-overview"))
    assert overview.context["total"] == 1 and "globex-1" not in overview.content.decode()
    assert [n.hostname for n in client.get(reverse("node-list")).context["page"].object_list] == ["acme-1"]
    export = b"".join(client.get(reverse("node-export")).streaming_content).decode()
    assert "acme-1" in export and "globex-1" not in export and "spare-1" not in export
    assert client.get(reverse("node-detail", args=[mine.pk])).status_code == 200
    for url in (reverse("node-detail", args=[theirs.pk]), reverse("node-history", args=[theirs.pk])):
        assert client.get(url).status_code == 404
    assert client.post(reverse("node-transition", args=[theirs.pk, "cordon"]), {"reason": "x"}).status_code == 404
    detail = client.get(reverse("node-detail", args=[mine.pk]))
    assert detail.context["transitions"] == [] and mine.bmc_address not in detail.content.decode()


def test_history_pages_through_older_rows(client, operator):
    node = NodeFactory(state=S.TRIAGE)
    actor = services.Actor.system("test")
    for i in range(30):
        services.record_event(node.pk, EventKind.NOTE, actor=actor, reason=f"note {i}")
    client.force_login(operator)
    first = client.get(reverse("node-detail", args=[node.pk])).context["history"]
    assert len(first.rows) == 25 and first.next_cursor
    more = client.get(reverse("node-history", args=[node.pk]), {"before": first.next_cursor})
    assert len(more.context["history"].rows) == 5 and more.context["history"].next_cursor is None
    assert client.get(reverse("node-history", args=[node.pk]), {"before": "garbage"}).status_code == 404


def _count_queries(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_list_and_detail_queries_do_not_grow_with_rows(client, operator):
    client.force_login(operator)
    node = NodeFactory(state=S.PRODUCTION)
    GPUFactory.create_batch(2, node=node)
    NodeFactory.create_batch(3, state=S.TRIAGE)
    small = [
        _count_queries(client, u)
        for u in (reverse("node-list"), reverse("fleet-overview"), reverse("node-detail", args=[node.pk]))
    ]
    for other in NodeFactory.create_batch(40, state=S.PRODUCTION):
        services.request_drain(other.pk, actor=services.Actor.system("t"), reason="r")
    GPUFactory.create_batch(6, node=node)
    for i in range(30):
        services.record_event(node.pk, EventKind.NOTE, actor=services.Actor.system("t"), reason=f"n{i}")
    large = [
        _count_queries(client, u)
        for u in (reverse("node-list"), reverse("fleet-overview"), reverse("node-detail", args=[node.pk]))
    ]
    assert small == large


def test_the_node_page_names_a_cluster_without_a_scheduler_in_words(client, operator):
    """ "Cluster: a (None)" read as a missing value; the kind without a scheduler has a label that says so."""
    node = NodeFactory(cluster=ClusterFactory(name="lab-a"))
    client.force_login(operator)
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert "lab-a (No scheduler)" in html and "(None)" not in html
