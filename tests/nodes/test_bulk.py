"""Bulk actions on the node list: one verb and one reason for a selection, run node by node."""

from __future__ import annotations

import pytest
from django.urls import reverse

from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodewarden.bulk import MAX_ITEMS
from nodewarden.celery import app as celery_app
from tests.factories import ClusterFactory, NodeFactory

S = NodeState
pytestmark = pytest.mark.django_db


def _bulk(client, nodes, action="start_draining", reason="rack PDU swap", **extra):
    data = {"action": action, "reason": reason, "ids": [n.pk for n in nodes], **extra}
    return client.post(reverse("node-bulk"), data, follow=True)


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_it_drains_ten_nodes_in_one_action_each_with_its_history_row_and_scheduler_drain(
    client, operator, busy_scheduler, django_capture_on_commit_callbacks
):
    cluster = ClusterFactory()
    nodes = NodeFactory.create_batch(10, cluster=cluster, state=S.PRODUCTION)
    client.force_login(operator)
    celery_app.conf.task_always_eager = True  # the follow-ups run inline when the request's work commits
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = _bulk(client, nodes)
    finally:
        celery_app.conf.task_always_eager = False
    assert _messages(response) == ["10 drained: " + ", ".join(n.hostname for n in nodes) + "."]
    for node in nodes:
        node.refresh_from_db()
        assert node.state == S.DRAINING
        event = NodeEvent.objects.get(node=node, transition="start_draining")
        assert (event.actor, event.reason, event.source_state) == (operator, "rack PDU swap", S.PRODUCTION)
        assert ("drain", node.hostname) in busy_scheduler.calls  # the node's usual drain road
    # One history row per node, not one for the batch.
    assert NodeEvent.objects.filter(transition="start_draining").count() == 10


def test_a_mix_of_allowed_and_refused_nodes_reports_each(client, operator):
    serving = NodeFactory.create_batch(3, state=S.PRODUCTION)
    broken = NodeFactory(hostname="gpu-a-003", state=S.TRIAGE)
    retired = NodeFactory(hostname="gpu-a-009", state=S.DECOMMISSIONED)
    client.force_login(operator)
    response = _bulk(client, [serving[0], broken, serving[1], retired, serving[2]], action="cordon", reason="XID 79")
    done, refused = _messages(response)
    assert done == "3 cordoned: " + ", ".join(n.hostname for n in serving) + "."
    assert refused.startswith("2 refused: gpu-a-003 (Cannot cordon a node in state 'Triage'.)")
    assert "gpu-a-009 (Cannot cordon a node in state 'Decommissioned'.)" in refused
    assert set(NodeEvent.objects.values_list("node__hostname", flat=True)) == {n.hostname for n in serving}
    broken.refresh_from_db()
    assert broken.state == S.TRIAGE


def test_revalidate_from_the_list_runs_the_same_verb_as_the_node_page(client, operator):
    nodes = NodeFactory.create_batch(2, state=S.TRIAGE)
    client.force_login(operator)
    response = _bulk(client, nodes, action="revalidate", reason="reseated cables")
    assert _messages(response) == ["2 sent to re-validation: " + ", ".join(n.hostname for n in nodes) + "."]
    for node in nodes:
        node.refresh_from_db()
        assert node.state == S.FIRMWARE_UPDATE and node.is_revalidation


def test_viewers_and_customers_cannot_bulk(client, viewer, customer, tenant):
    node = NodeFactory(state=S.PRODUCTION, tenant=tenant)
    for user in (viewer, customer):
        client.force_login(user)
        response = client.post(reverse("node-bulk"), {"action": "cordon", "reason": "x", "ids": [node.pk]})
        assert response.status_code == 403
        assert b'name="ids"' not in client.get(reverse("node-list")).content
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


def test_a_selection_over_the_bound_is_refused_and_nothing_is_done(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    ids = [node.pk, *range(10**6, 10**6 + MAX_ITEMS)]
    response = client.post(reverse("node-bulk"), {"action": "cordon", "reason": "x", "ids": ids})
    assert response.status_code == 400
    assert f"At most {MAX_ITEMS}" in response.content.decode()
    node.refresh_from_db()
    assert node.state == S.PRODUCTION and not NodeEvent.objects.exists()


@pytest.mark.parametrize(
    ("data", "status"),
    [
        ({"action": "cordon", "reason": "x"}, 400),  # nothing selected
        ({"action": "cordon", "reason": "x", "ids": ["1; drop"]}, 400),
        ({"action": "force_state", "reason": "x", "ids": ["1"]}, 400),  # admin-only, never in bulk
        ({"action": "cordon", "reason": "x", "ids": ["99999999999999999999"]}, 400),
    ],
)
def test_bad_selections_are_a_400_not_a_500(client, operator, data, status):
    client.force_login(operator)
    assert client.post(reverse("node-bulk"), data).status_code == status


def test_without_a_reason_it_is_a_400_and_nothing_is_done(client, operator):
    nodes = NodeFactory.create_batch(2, state=S.PRODUCTION)
    client.force_login(operator)
    response = _bulk(client, nodes, action="cordon", reason="  ")
    assert response.status_code == 400 and "A reason is required" in response.content.decode()
    assert not NodeEvent.objects.exists()


def test_an_unknown_node_id_is_reported_and_the_others_done(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    response = client.post(
        reverse("node-bulk"), {"action": "cordon", "reason": "x", "ids": [node.pk, 424242]}, follow=True
    )
    assert _messages(response) == [f"1 cordoned: {node.hostname}.", "1 refused: node 424242 (no such node)."]


def test_the_list_shows_checkboxes_and_the_bar_to_operators(client, operator):
    nodes = NodeFactory.create_batch(3, state=S.PRODUCTION)
    client.force_login(operator)
    html = client.get(reverse("node-list")).content.decode()
    assert 'data-select-all="node-bulk"' in html and 'id="node-bulk"' in html
    for node in nodes:
        assert f'name="ids" value="{node.pk}" form="node-bulk"' in html
    assert '<option value="start_draining">Drain now</option>' in html


def test_it_goes_back_to_the_same_filtered_page(client, operator):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)
    response = client.post(
        reverse("node-bulk"), {"action": "cordon", "reason": "x", "ids": [node.pk], "next": "/nodes/?state=triage"}
    )
    assert response.status_code == 302 and response["Location"] == "/nodes/?state=triage"
    response = client.post(
        reverse("node-bulk"), {"action": "cordon", "reason": "x", "ids": [node.pk], "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("node-list")
