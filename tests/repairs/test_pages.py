"""Repair and RMA pages: lists with filters and pages, a record's history and its buttons for
operators, the node page's partial, and scoping (a customer reads its own nodes' records only)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from nodes.choices import NodeState
from repairs.choices import RmaState, TicketState
from repairs.models import RepairTicket, RmaCase

pytestmark = pytest.mark.django_db
S = NodeState


def test_the_ticket_list_filters_by_state_site_rack_and_component(client, operator, node_in, ticket_on):
    node, other = node_in(S.TRIAGE), node_in(S.TRIAGE)
    gpu = ticket_on(node, "GPU 3 (serial 1650123)", started=True)
    dimm = ticket_on(other, "DIMM B4")
    client.force_login(operator)
    url = reverse("repair-list")
    html = client.get(url).content.decode()
    assert "GPU 3 (serial 1650123)" in html and "DIMM B4" in html and "2 tickets" in html
    assert 'class="active">Repairs</a>' in html
    assert "DIMM B4" not in client.get(url, {"state": TicketState.IN_PROGRESS}).content.decode()
    assert "GPU 3" not in client.get(url, {"site": other.site.slug}).content.decode()
    assert "DIMM" not in client.get(url, {"rack": node.rack.name}).content.decode()
    found = client.get(url, {"q": "dimm", "state": ""}).content.decode()
    assert f"#{dimm.pk}" in found and f"#{gpu.pk}<" not in found
    assert "Invalid filter" in client.get(url, {"state": "lost"}).content.decode()


def test_the_ticket_list_is_paged(client, operator, node_in, ticket_on, monkeypatch):
    from repairs import views

    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    node = node_in(S.REPAIR)
    for n in range(3):
        ticket_on(node, f"DIMM A{n}")
    client.force_login(operator)
    html = client.get(reverse("repair-list"), {"state": "open"}).content.decode()
    assert "Page 1 of 2" in html and "?state=open&page=2" in html


def test_the_ticket_page_shows_place_history_and_the_verbs_of_its_state(client, operator, node_in, ticket_on):
    ticket = ticket_on(node_in(S.TRIAGE))
    client.force_login(operator)
    html = client.get(reverse("repair-detail", args=[ticket.pk])).content.decode()
    assert f"U{ticket.rack_unit}" in html and "XID 79: fell off the bus" in html
    assert 'data-verb="start"' in html and 'data-verb="cancel"' in html and 'data-verb="resolve"' not in html


def test_an_operator_works_a_ticket_from_its_page_and_the_node_revalidates(client, operator, node_in, ticket_on):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node)
    client.force_login(operator)
    for verb in ("start", "resolve"):
        response = client.post(reverse("repair-action", args=[ticket.pk, verb]), {"reason": f"{verb} it"})
        assert response.status_code == 302 and response["Location"] == reverse("repair-detail", args=[ticket.pk])
    ticket.refresh_from_db()
    node.refresh_from_db()
    assert ticket.state == TicketState.RESOLVED and node.state == S.FIRMWARE_UPDATE


def test_a_refusal_on_the_page_is_a_message_and_changes_nothing(client, operator, node_in, ticket_on):
    ticket = ticket_on(node_in(S.TRIAGE))
    client.force_login(operator)
    blank = client.post(reverse("repair-action", args=[ticket.pk, "start"]), {"reason": " "}, follow=True)
    assert "A reason is required." in blank.content.decode()
    wrong = client.post(reverse("repair-action", args=[ticket.pk, "resolve"]), {"reason": "x"}, follow=True)
    assert "Cannot resolve ticket" in wrong.content.decode()
    assert client.post(reverse("repair-action", args=[ticket.pk, "explode"]), {"reason": "x"}).status_code == 404
    ticket.refresh_from_db()
    assert ticket.state == TicketState.OPEN


def test_a_viewer_reads_but_may_not_act(client, viewer, node_in, ticket_on):
    ticket = ticket_on(node_in(S.TRIAGE))
    client.force_login(viewer)
    html = client.get(reverse("repair-detail", args=[ticket.pk])).content.decode()
    assert 'data-verb="start"' not in html
    assert client.post(reverse("repair-action", args=[ticket.pk, "start"]), {"reason": "x"}).status_code == 403


def test_a_customer_sees_its_own_nodes_tickets_read_only_and_404_for_others(
    client, customer, tenant, other_tenant, node_in, ticket_on, case_on
):
    mine = ticket_on(node_in(S.TRIAGE, tenant=tenant), "PSU 1")
    theirs = ticket_on(node_in(S.TRIAGE, tenant=other_tenant), "PSU 2")
    my_case, their_case = case_on(node_in(S.TRIAGE, tenant=tenant)), case_on(node_in(S.TRIAGE, tenant=other_tenant))
    client.force_login(customer)
    listing = client.get(reverse("repair-list")).content.decode()
    assert "PSU 1" in listing and "PSU 2" not in listing and ">Repairs</a>" not in listing  # no nav link
    html = client.get(reverse("repair-detail", args=[mine.pk])).content.decode()
    assert "Read-only view." in html and '<form method="post" class="actions"' not in html
    assert client.get(reverse("repair-detail", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("repair-action", args=[theirs.pk, "start"]), {"reason": "x"}).status_code == 404
    assert client.post(reverse("repair-action", args=[mine.pk, "start"]), {"reason": "x"}).status_code == 403
    assert client.get(reverse("rma-detail", args=[my_case.pk])).status_code == 200
    assert client.get(reverse("rma-detail", args=[their_case.pk])).status_code == 404
    cases = client.get(reverse("rma-list")).content.decode()
    assert f"#{my_case.pk}<" in cases and f"#{their_case.pk}<" not in cases


def test_the_pages_need_a_login(client, node_in, ticket_on):
    ticket = ticket_on(node_in(S.TRIAGE))
    for url in (reverse("repair-list"), reverse("repair-detail", args=[ticket.pk]), reverse("rma-list")):
        assert client.get(url).status_code == 302


# --- RMA pages ----------------------------------------------------------------------
def test_an_operator_walks_an_rma_case_from_its_page(client, operator, node_in, case_on):
    node = node_in(S.TRIAGE)
    case = case_on(node)
    client.force_login(operator)
    page = client.get(reverse("rma-detail", args=[case.pk])).content.decode()
    assert 'data-verb="ship"' in page and 'name="vendor_case_number"' in page
    client.post(reverse("rma-action", args=[case.pk, "ship"]), {"reason": "courier", "vendor_case_number": "NV-9"})
    page = client.get(reverse("rma-detail", args=[case.pk])).content.decode()
    assert 'name="outcome"' in page and 'name="replacement_serial"' in page and "NV-9" in page
    refused = client.post(
        reverse("rma-action", args=[case.pk, "receive"]), {"reason": "back", "outcome": "replaced"}, follow=True
    ).content.decode()
    assert "This field is required." in refused
    client.post(
        reverse("rma-action", args=[case.pk, "receive"]),
        {"reason": "back", "outcome": "replaced", "replacement_serial": "1650777"},
    )
    client.post(reverse("rma-action", args=[case.pk, "close"]), {"reason": "installed"})
    case.refresh_from_db()
    node.refresh_from_db()
    assert (case.state, case.replacement_serial, node.state) == (RmaState.CLOSED, "1650777", S.FIRMWARE_UPDATE)


def test_the_rma_list_filters_by_state_outcome_and_vendor(client, operator, node_in, case_on):
    returned = case_on(node_in(S.TRIAGE), to="returned")
    opened = case_on(node_in(S.TRIAGE))
    client.force_login(operator)
    url = reverse("rma-list")
    assert f"#{opened.pk}<" in client.get(url).content.decode()
    only_returned = client.get(url, {"state": "returned", "outcome": "replaced", "vendor": "nvidia"}).content.decode()
    assert f"#{returned.pk}<" in only_returned and f"#{opened.pk}<" not in only_returned


# --- The node page's partial ---------------------------------------------------------
def test_the_node_partial_lists_tickets_and_cases_and_offers_forms_to_operators(
    client, operator, node_in, ticket_on, case_on
):
    node = node_in(S.REPAIR)
    ticket_on(node, "HCA mlx5_2")
    case_on(node, move_node=False)
    client.force_login(operator)
    html = client.get(reverse("node-repairs", args=[node.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert "HCA mlx5_2" in html and "H100 80GB SXM5" in html
    assert 'id="open-repair-ticket"' in html and 'id="open-rma-case"' in html
    assert "<html" not in html  # a fragment, for htmx


def test_an_operator_opens_a_ticket_and_a_case_from_the_node_partial(client, operator, node_in):
    node = node_in(S.TRIAGE)
    client.force_login(operator)
    response = client.post(
        reverse("node-repair-open", args=[node.pk]),
        {"component": "PSU 2", "what": "Replace PSU", "reason": "PSU alarm"},
    )
    ticket = RepairTicket.objects.get()
    assert response["Location"] == reverse("repair-detail", args=[ticket.pk])
    node.refresh_from_db()
    assert node.state == S.REPAIR
    client.post(
        reverse("node-rma-open", args=[node.pk]),
        {"vendor": "Delta", "part": "PSU 3kW", "failed_serial": "DPS-1", "reason": "dead", "keep_node": "1"},
    )
    node.refresh_from_db()
    assert RmaCase.objects.get().vendor == "Delta" and node.state == S.REPAIR  # kept where it was
    missing = client.post(
        reverse("node-repair-open", args=[node.pk]), {"component": "", "what": "", "reason": "x"}, follow=True
    ).content.decode()
    assert "component: This field is required." in missing and RepairTicket.objects.count() == 1


def test_the_node_partial_is_scoped_and_read_only_for_customers(
    client, customer, tenant, other_tenant, node_in, ticket_on
):
    mine, theirs = node_in(S.TRIAGE, tenant=tenant), node_in(S.TRIAGE, tenant=other_tenant)
    ticket_on(mine, "PSU 1")
    client.force_login(customer)
    html = client.get(reverse("node-repairs", args=[mine.pk])).content.decode()
    assert "PSU 1" in html and "open-repair-ticket" not in html
    assert client.get(reverse("node-repairs", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("node-repair-open", args=[theirs.pk]), {"reason": "x"}).status_code == 404
    assert client.post(reverse("node-repair-open", args=[mine.pk]), {"reason": "x"}).status_code == 403


# --- Bounded queries ------------------------------------------------------------------
def page_queries(user, url: str) -> int:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("persona", ["operator", "customer"])
def test_the_lists_cost_the_same_for_3_and_30_rows(request, persona, tenant, node_in, ticket_on, case_on):
    user = request.getfixturevalue(persona)

    def add(count: int) -> None:
        for _ in range(count):
            node = node_in(S.TRIAGE, tenant=tenant)
            ticket_on(node)
            case_on(node)

    add(3)
    few = [page_queries(user, reverse(name)) for name in ("repair-list", "rma-list")]
    add(27)
    assert [page_queries(user, reverse(name)) for name in ("repair-list", "rma-list")] == few
