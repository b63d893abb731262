"""The node list's bulk actions declared in ``remediation.bulk``: take-outs within the configured
blast-radius limits node by node, holds of automated remediation, repair tickets; and the
registry they are declared in (``nodewarden.bulk``), which renders the bar and dispatches."""

from __future__ import annotations

import pytest
from django.urls import reverse

from nodes.choices import EventKind, NodeState
from nodes.models import NodeEvent
from nodewarden import bulk
from remediation import safety
from remediation.choices import Domain
from remediation.models import BlastRadiusLimit, Hold
from repairs.models import RepairTicket
from tests.factories import ClusterFactory, NodeFactory

S = NodeState
pytestmark = pytest.mark.django_db


def _bulk(client, nodes, action, reason="rack B PDU swap", **extra):
    data = {"action": action, "reason": reason, "ids": [n.pk for n in nodes], **extra}
    return client.post(reverse("node-bulk"), data, follow=True)


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def rack_b():
    """Ten serving nodes of one cluster, under a cluster limit of three nodes out at once."""
    cluster = ClusterFactory(name="east")
    BlastRadiusLimit.objects.create(domain=Domain.CLUSTER, max_share=1.0, max_count=3, max_drains_per_hour=100)
    return [NodeFactory(hostname=f"gpu-b-{i:02d}", cluster=cluster, state=S.PRODUCTION) for i in range(10)]


def test_a_bulk_drain_stops_at_the_blast_radius_limit_as_if_node_by_node(client, operator, rack_b):
    client.force_login(operator)

    response = _bulk(client, rack_b, "start_draining")

    done, refused = _messages(response)
    assert done == "3 drained: gpu-b-00, gpu-b-01, gpu-b-02."
    assert refused.startswith("7 refused: gpu-b-03 (stopped by the blast-radius limit of the cluster: 3 of 10 nodes")
    assert refused.count("stopped by the blast-radius limit of the cluster") == 7
    assert sorted(NodeEvent.objects.filter(transition="start_draining").values_list("hostname", flat=True)) == [
        "gpu-b-00",
        "gpu-b-01",
        "gpu-b-02",
    ]
    assert [n.state for n in type(rack_b[0]).objects.filter(pk__in=[n.pk for n in rack_b]).order_by("hostname")] == [
        S.DRAINING
    ] * 3 + [S.PRODUCTION] * 7


def test_nodes_set_to_drain_count_against_the_limit(client, operator, rack_b):
    client.force_login(operator)

    response = _bulk(client, rack_b, "request_drain")

    assert _messages(response)[0] == "3 set to drain when their job ends: gpu-b-00, gpu-b-01, gpu-b-02."
    assert NodeEvent.objects.filter(transition="request_drain").count() == 3


def test_start_maintenance_per_node_with_one_reason_within_the_blast_radius_limit(client, operator, rack_b):
    client.force_login(operator)
    assert '<option value="start_maintenance">Start maintenance</option>' in (
        client.get(reverse("node-list")).content.decode()
    )

    response = _bulk(client, rack_b, "start_maintenance", reason="rack B PDU swap")

    done, refused = _messages(response)
    assert done == "3 set to maintenance (drain when their job ends): gpu-b-00, gpu-b-01, gpu-b-02."
    assert refused.startswith("7 refused: gpu-b-03 (stopped by the blast-radius limit of the cluster: 3 of 10 nodes")
    events = NodeEvent.objects.filter(transition="start_maintenance").order_by("hostname")
    assert [(e.hostname, e.reason, e.actor) for e in events] == [
        (f"gpu-b-0{i}", "rack B PDU swap", operator) for i in range(3)
    ]
    states = dict(type(rack_b[0]).objects.filter(pk__in=[n.pk for n in rack_b]).values_list("hostname", "state"))
    assert [states[n.hostname] for n in rack_b] == [S.DRAIN_PENDING] * 3 + [S.PRODUCTION] * 7

    # A node not in production is refused with the verb's own reason, the others unaffected.
    again = _bulk(client, rack_b[:1], "start_maintenance", reason="twice")
    assert _messages(again)[0].startswith("1 refused: gpu-b-00 (")


def test_without_a_configured_limit_an_operator_drains_ten_nodes_in_one_action(client, operator):
    # The built-in default (10% of a cluster) is for automation; an operator's bulk action counts
    # only the limits an admin configured.
    cluster = ClusterFactory()
    nodes = [NodeFactory(cluster=cluster, state=S.PRODUCTION) for _ in range(10)]
    client.force_login(operator)

    response = _bulk(client, nodes, "start_draining")

    assert _messages(response) == ["10 drained: " + ", ".join(n.hostname for n in nodes) + "."]
    assert NodeEvent.objects.filter(transition="start_draining", reason="rack B PDU swap").count() == 10


def test_hold_pauses_automated_remediation_per_node_with_one_reason(client, operator, rack_b):
    held = rack_b[:3]
    client.force_login(operator)

    response = _bulk(client, held, "hold", reason="vendor firmware bug, do not reboot")

    assert _messages(response) == ["3 held (no automated remediation until released): gpu-b-00, gpu-b-01, gpu-b-02."]
    for node in held:
        hold = Hold.objects.get(node=node, released_at__isnull=True)
        assert "vendor firmware bug, do not reboot" in hold.reason and hold.actor_name == operator.username
        note = NodeEvent.objects.get(node=node, kind=EventKind.NOTE)
        assert (note.actor, note.details["hold"]) == (operator, hold.pk)
        # The remediation engine's safety rails honour it ...
        assert safety.block_reason(node, taking_out=True).startswith("on hold: ")
        # ... and the node page says so.
        page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
        assert "On hold" in page and "No automated remediation on this node until released" in page
    assert safety.block_reason(rack_b[3], taking_out=False) is None

    again = _bulk(client, held[:1], "hold", reason="twice")
    assert _messages(again) == ["1 refused: gpu-b-00 (already on hold: vendor firmware bug, do not reboot (operator))."]

    released = _bulk(client, held, "release_hold", reason="fixed firmware out")
    assert _messages(released)[0] == "3 released from hold: gpu-b-00, gpu-b-01, gpu-b-02."
    assert not Hold.objects.filter(released_at__isnull=True).exists()
    assert safety.block_reason(held[0], taking_out=False) is None


def test_open_a_repair_ticket_per_node_and_a_node_in_triage_goes_to_repair(client, operator):
    broken = NodeFactory(hostname="gpu-c-01", state=S.TRIAGE)
    serving = NodeFactory(hostname="gpu-c-02", state=S.PRODUCTION)
    client.force_login(operator)

    response = _bulk(client, [broken, serving], "open_ticket", reason="reseat the OSFP cages")

    assert _messages(response) == ["2 given a repair ticket: gpu-c-01, gpu-c-02."]
    for node in (broken, serving):
        ticket = RepairTicket.objects.get(node=node)
        assert (ticket.what, ticket.opened_by, ticket.component) == ("reseat the OSFP cages", operator, "node")
    broken.refresh_from_db()
    serving.refresh_from_db()
    assert (broken.state, serving.state) == (S.REPAIR, S.PRODUCTION)


def test_the_bar_renders_and_the_view_dispatches_from_the_registry(client, operator, monkeypatch):
    calls = []

    def probe(ids, user, reason, post):
        calls.append((ids, user, reason))
        return [bulk.Outcome(f"n{pk}", done=True) for pk in ids]

    monkeypatch.setitem(
        bulk.REGISTRY["nodes"], "probe", bulk.BulkAction("probe", "Probe them", "nodes.operate_node", probe, "probed")
    )
    nodes = NodeFactory.create_batch(2, state=S.PRODUCTION)
    client.force_login(operator)

    html = client.get(reverse("node-list")).content.decode()
    assert '<option value="probe">Probe them</option>' in html
    for name in ("hold", "release_hold", "open_ticket", "start_draining", "cordon", "revalidate"):
        assert f'<option value="{name}">' in html
    response = _bulk(client, nodes, "probe", reason="just looking")
    assert _messages(response) == [f"2 probed: n{nodes[0].pk}, n{nodes[1].pk}."]
    assert calls == [([n.pk for n in nodes], operator, "just looking")]


def test_an_action_is_refused_403_to_whom_its_permission_is_not_given(client, operator, monkeypatch):
    def never(ids, user, reason, post):
        raise AssertionError("must not run")

    monkeypatch.setitem(
        bulk.REGISTRY["nodes"], "wipe", bulk.BulkAction("wipe", "Wipe", "nodes.delete_node", never, "wiped")
    )
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)

    response = client.post(reverse("node-bulk"), {"action": "wipe", "reason": "x", "ids": [node.pk]})

    assert response.status_code == 403
    assert '<option value="wipe">' not in client.get(reverse("node-list")).content.decode()


def test_a_customer_cannot_hold_or_ticket(client, customer, tenant):
    node = NodeFactory(state=S.PRODUCTION, tenant=tenant)
    client.force_login(customer)
    for action in ("hold", "open_ticket", "start_draining"):
        response = client.post(reverse("node-bulk"), {"action": action, "reason": "x", "ids": [node.pk]})
        assert response.status_code == 403
    assert not Hold.objects.exists() and not RepairTicket.objects.exists()


@pytest.mark.parametrize("action", ["hold", "open_ticket", "start_draining", "start_maintenance"])
def test_without_a_reason_nothing_is_done_and_it_is_a_400(client, operator, action):
    node = NodeFactory(state=S.PRODUCTION)
    client.force_login(operator)

    response = client.post(reverse("node-bulk"), {"action": action, "reason": " ", "ids": [node.pk]})

    assert response.status_code == 400
    assert not Hold.objects.exists() and not RepairTicket.objects.exists() and not NodeEvent.objects.exists()
