"""The node page header of a node in repair or RMA: the ticket or case that holds it, who has it,
since when, and what follows (re-validation with its plan) once it is resolved or closed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from nodes.choices import NodeState
from validation.choices import Reentry, Stage
from validation.models import RevalidationPlan

pytestmark = pytest.mark.django_db


def _header(client, node) -> str:
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    start = html.index('id="why-here"')
    return html[start : html.index("</section>", start)]


def _fact(header: str, key: str) -> str:
    start = header.index(f'data-fact="{key}"')
    return header[start : header.index("</dd>", start)]


def test_a_node_in_repair_shows_its_ticket_its_technician_its_age_and_the_revalidation_after(
    client, operator, node_in, ticket_on
):
    RevalidationPlan.objects.create(reentry=Reentry.REPAIR, stages=[Stage.BURN_IN, Stage.RELIABILITY])
    node = node_in(NodeState.TRIAGE)
    ticket = ticket_on(node, started=True)
    node.refresh_from_db()
    assert node.state == NodeState.REPAIR
    client.force_login(operator)
    header = _header(client, node)
    assert f'<a href="{reverse("repair-detail", args=[ticket.pk])}">Repair ticket #{ticket.pk}</a>' in header
    line = _fact(header, "repair")
    assert "In progress, assigned to dc-tech-7" in line
    assert f"opened {ticket.created:%Y-%m-%d %H:%M} UTC" in line and "ago" in line
    assert "GPU 3 (serial 1650123)" in line
    assert "Next: re-validation" in line and "when the ticket is resolved" in line
    then = _fact(header, "validation")
    assert "Back from repair" in then or "back from repair" in then
    assert "Burn-in, Reliability assessment, then production" in then
    assert header.index('data-fact="repair"') < header.index('data-fact="bmc"')


def test_a_node_in_rma_shows_its_case_the_vendors_number_and_what_follows(client, operator, node_in, case_on):
    node = node_in(NodeState.TRIAGE)
    case = case_on(node, to="shipped")
    node.refresh_from_db()
    assert node.state == NodeState.RMA
    client.force_login(operator)
    header = _header(client, node)
    assert f'<a href="{reverse("rma-detail", args=[case.pk])}">RMA #{case.pk}</a>' in header
    line = _fact(header, "rma")
    assert "Shipped to vendor (NVIDIA case C-42), H100 80GB SXM5" in line and "Shipped 20" in line
    assert "Next: re-validation" in line and "the case is closed" in line
    # No plan for RMA: re-validation walks every stage.
    assert "Firmware, Inventory check, Burn-in, Fabric and cable check, Reliability assessment" in _fact(
        header, "validation"
    )


def test_a_customer_sees_that_a_technician_has_the_ticket_not_who(
    client, operator, customer, tenant, node_in, ticket_on
):
    node = node_in(NodeState.TRIAGE, tenant=tenant)
    ticket_on(node, started=True)
    client.force_login(customer)
    line = _fact(_header(client, node), "repair")
    assert "assigned to a technician" in line and "dc-tech-7" not in line
