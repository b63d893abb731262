"""Django admin: overrides go through the service layer, need a permission and a reason, and are recorded."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import NoReverseMatch, reverse

from nodes.choices import EventKind, NodeState
from nodes.models import Node, NodeEvent
from nodes.tasks import snapshot_state_counts
from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db
CHANGELIST = "admin:nodes_node_changelist"


def _force(client, nodes, **form):
    data = {"action": "force_state_action", ACTION_CHECKBOX_NAME: [n.pk for n in nodes], **form}
    return client.post(reverse(CHANGELIST), data, follow=True)


def test_fleet_admin_forces_a_state_with_a_reason_and_it_is_recorded(client, fleet_admin):
    nodes = NodeFactory.create_batch(2, state=NodeState.PRODUCTION)
    client.force_login(fleet_admin)
    confirm = client.post(
        reverse(CHANGELIST), {"action": "force_state_action", ACTION_CHECKBOX_NAME: [n.pk for n in nodes]}
    )
    assert confirm.status_code == 200 and b"Force state" in confirm.content  # the intermediate form
    _force(client, nodes, target=NodeState.REPAIR, reason="Vendor confirmed bad baseboard", apply="1")
    for node in nodes:
        node.refresh_from_db()
        assert node.state == NodeState.REPAIR
        event = NodeEvent.objects.get(node=node)
        assert event.kind == EventKind.FORCED and event.actor == fleet_admin
        assert event.reason == "Vendor confirmed bad baseboard" and event.source_state == NodeState.PRODUCTION


def test_force_without_reason_changes_nothing(client, fleet_admin):
    node = NodeFactory(state=NodeState.PRODUCTION)
    client.force_login(fleet_admin)
    response = _force(client, [node], target=NodeState.REPAIR, reason="", apply="1")
    assert b"This field is required" in response.content
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION and not NodeEvent.objects.exists()


def test_staff_without_the_force_permission_do_not_get_the_action(client, operator):
    from django.contrib.auth.models import Permission

    operator.user_permissions.add(*Permission.objects.filter(codename__in=["view_node", "change_node"]))
    node = NodeFactory(state=NodeState.PRODUCTION)
    client.force_login(operator)
    changelist = client.get(reverse(CHANGELIST))
    assert changelist.status_code == 200 and b"force_state_action" not in changelist.content
    _force(client, [node], target=NodeState.REPAIR, reason="sneaky", apply="1")
    node.refresh_from_db()
    assert node.state == NodeState.PRODUCTION and not NodeEvent.objects.exists()


def test_the_state_is_read_only_on_the_change_form(client, fleet_admin):
    node = NodeFactory(state=NodeState.PRODUCTION)
    GPUFactory(node=node)
    client.force_login(fleet_admin)
    url = reverse("admin:nodes_node_change", args=[node.pk])
    form = client.get(url)
    assert form.status_code == 200 and b'name="state"' not in form.content
    data = {k: v for k, v in form.context["adminform"].form.initial.items() if v is not None}
    data.update(
        {
            "state": NodeState.RMA,
            "gpus-TOTAL_FORMS": 0,
            "gpus-INITIAL_FORMS": 0,
            "events-TOTAL_FORMS": 0,
            "events-INITIAL_FORMS": 0,
        }
    )
    client.post(url, data)
    assert Node.objects.get(pk=node.pk).state == NodeState.PRODUCTION


def test_every_admin_page_renders(client, fleet_admin):
    node = NodeFactory(state=NodeState.TRIAGE)
    snapshot_state_counts()
    client.force_login(fleet_admin)
    for name in (
        "nodes_node",
        "nodes_nodeevent",
        "nodes_gpu",
        "nodes_statecountsnapshot",
        "nodes_run",
        "fleet_site",
        "fleet_cluster",
        "fleet_rack",
        "fleet_tenant",
        "fleet_hardwareprofile",
        "fleet_persona",
    ):
        try:
            url = reverse(f"admin:{name}_changelist")
        except NoReverseMatch:  # GPU has no admin of its own (inline on the node)
            continue
        assert client.get(url).status_code == 200, name
        assert client.get(url, {"q": "x"}).status_code == 200, name
    assert client.get(reverse("admin:nodes_node_change", args=[node.pk])).status_code == 200
