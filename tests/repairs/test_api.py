"""The repairs API: open on a node (201), verbs as POSTs with a reason (200), refusals as
400/403/404/409, tenant scoping, CSV exports, and list costs that do not grow with the rows."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nodes.choices import NodeState
from repairs.choices import RmaState, TicketState
from repairs.models import RepairTicket, RmaCase

from .conftest import api

pytestmark = pytest.mark.django_db
S = NodeState
OPEN_TICKET = {"component": "GPU 3 (serial 1650123)", "what": "Replace the GPU", "reason": "XID 79", "finding_id": 11}
OPEN_CASE = {"vendor": "NVIDIA", "part": "H100 80GB SXM5", "failed_serial": "1650123", "reason": "RMA approved"}


def test_an_operator_opens_a_ticket_on_a_node_and_it_goes_to_repair(operator, node_in):
    node = node_in(S.TRIAGE)
    response = api(operator).post(f"/api/nodes/{node.pk}/repairs/", OPEN_TICKET, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == TicketState.OPEN and body["finding_id"] == 11 and body["rack_unit"] == 12
    assert body["opened_by"] == "operator" and [e["verb"] for e in body["events"]] == ["open"]
    node.refresh_from_db()
    assert node.state == S.REPAIR
    listed = api(operator).get(f"/api/nodes/{node.pk}/repairs/").json()
    assert [t["id"] for t in listed["results"]] == [body["id"]]


def test_opening_with_move_node_false_keeps_the_node(operator, node_in):
    node = node_in(S.TRIAGE)
    assert (
        api(operator)
        .post(f"/api/nodes/{node.pk}/repairs/", {**OPEN_TICKET, "move_node": False}, format="json")
        .status_code
        == 201
    )
    node.refresh_from_db()
    assert node.state == S.TRIAGE


def test_opening_answers_400_403_404_and_409(operator, viewer, customer, tenant, other_tenant, node_in):
    node = node_in(S.TRIAGE, tenant=tenant)
    url = f"/api/nodes/{node.pk}/repairs/"
    assert api(operator).post(url, {**OPEN_TICKET, "reason": ""}, format="json").status_code == 400
    missing = api(operator).post(url, {"reason": "x", "component": " ", "what": "x"}, format="json")
    assert missing.status_code == 400 and "component" in missing.json()["fields"]
    assert api(viewer).post(url, OPEN_TICKET, format="json").status_code == 403
    assert api(customer).post(url, OPEN_TICKET, format="json").status_code == 403  # own node: read-only
    elsewhere = node_in(S.TRIAGE, tenant=other_tenant)
    assert api(customer).post(f"/api/nodes/{elsewhere.pk}/repairs/", OPEN_TICKET, format="json").status_code == 404
    assert api(operator).post("/api/nodes/999999/repairs/", OPEN_TICKET, format="json").status_code == 404
    gone = node_in(S.DECOMMISSIONED)
    assert api(operator).post(f"/api/nodes/{gone.pk}/repairs/", OPEN_TICKET, format="json").status_code == 409
    assert not RepairTicket.objects.exists()


def test_ticket_verbs_answer_200_and_resolve_sends_the_node_to_revalidation(operator, node_in, ticket_on):
    node = node_in(S.TRIAGE)
    ticket = ticket_on(node)
    client = api(operator)
    started = client.post(f"/api/repairs/{ticket.pk}/start/", {"reason": "on site", "assignee": "tech-3"})
    assert started.status_code == 200 and started.json()["assignee"] == "tech-3"
    resolved = client.post(f"/api/repairs/{ticket.pk}/resolve/", {"reason": "GPU replaced"})
    assert resolved.status_code == 200 and resolved.json()["state"] == TicketState.RESOLVED
    assert [e["to_state"] for e in resolved.json()["events"]] == ["open", "in_progress", "resolved"]
    node.refresh_from_db()
    assert node.state == S.FIRMWARE_UPDATE


def test_ticket_verbs_answer_400_403_404_and_409(operator, viewer, customer, tenant, other_tenant, node_in, ticket_on):
    mine = ticket_on(node_in(S.TRIAGE, tenant=tenant))
    theirs = ticket_on(node_in(S.TRIAGE, tenant=other_tenant))
    assert api(operator).post(f"/api/repairs/{mine.pk}/start/", {"reason": ""}).status_code == 400
    assert api(viewer).post(f"/api/repairs/{mine.pk}/start/", {"reason": "x"}).status_code == 403
    assert api(customer).post(f"/api/repairs/{mine.pk}/start/", {"reason": "x"}).status_code == 403
    assert api(customer).post(f"/api/repairs/{theirs.pk}/start/", {"reason": "x"}).status_code == 404
    conflict = api(operator).post(f"/api/repairs/{mine.pk}/resolve/", {"reason": "x"})
    assert conflict.status_code == 409 and "it is open" in conflict.json()["detail"]
    assert api(operator).post("/api/repairs/999999/cancel/", {"reason": "x"}).status_code == 404
    mine.refresh_from_db()
    assert mine.state == TicketState.OPEN


def test_customers_list_and_read_only_their_own_nodes_tickets(customer, tenant, other_tenant, node_in, ticket_on):
    mine = ticket_on(node_in(S.TRIAGE, tenant=tenant))
    theirs = ticket_on(node_in(S.TRIAGE, tenant=other_tenant))
    client = api(customer)
    assert [t["id"] for t in client.get("/api/repairs/").json()["results"]] == [mine.pk]
    assert client.get(f"/api/repairs/{mine.pk}/").status_code == 200
    assert client.get(f"/api/repairs/{theirs.pk}/").status_code == 404


def test_the_ticket_list_filters_by_state_site_rack_and_search(operator, node_in, ticket_on):
    first, second = node_in(S.TRIAGE), node_in(S.TRIAGE)
    gpu = ticket_on(first, started=True)
    psu = ticket_on(second, "PSU 2")
    client = api(operator)

    def ids(**query):  # type: ignore[no-untyped-def]
        return [t["id"] for t in client.get("/api/repairs/", query).json()["results"]]

    assert ids(state="in_progress") == [gpu.pk]
    assert ids(site=second.site.slug) == [psu.pk]
    assert ids(rack=first.rack.name) == [gpu.pk]
    assert ids(q="psu") == [psu.pk]
    assert client.get("/api/repairs/", {"state": "lost"}).status_code == 400


# --- RMA ----------------------------------------------------------------------------------
def test_an_rma_case_is_opened_shipped_received_and_closed_through_the_api(operator, node_in):
    node = node_in(S.REPAIR)
    client = api(operator)
    opened = client.post(f"/api/nodes/{node.pk}/rma/", OPEN_CASE, format="json")
    assert opened.status_code == 201, opened.content
    pk = opened.json()["id"]
    node.refresh_from_db()
    assert node.state == S.RMA
    assert client.post(f"/api/rma/{pk}/ship/", {"reason": "shipped", "vendor_case_number": "NV-1"}).status_code == 200
    bad = client.post(f"/api/rma/{pk}/receive/", {"reason": "back", "outcome": "lost"})
    assert bad.status_code == 400 and "outcome" in bad.json()["fields"]
    no_serial = client.post(f"/api/rma/{pk}/receive/", {"reason": "back", "outcome": "replaced"})
    assert no_serial.status_code == 400 and "replacement_serial" in no_serial.json()["fields"]
    received = client.post(
        f"/api/rma/{pk}/receive/", {"reason": "back", "outcome": "replaced", "replacement_serial": "1650999"}
    )
    assert received.status_code == 200 and received.json()["outcome"] == "replaced"
    closed = client.post(f"/api/rma/{pk}/close/", {"reason": "installed"})
    assert closed.status_code == 200 and closed.json()["state"] == RmaState.CLOSED
    node.refresh_from_db()
    assert node.state == S.FIRMWARE_UPDATE
    assert client.post(f"/api/rma/{pk}/cancel/", {"reason": "late"}).status_code == 409


def test_rma_refusals_answer_400_403_404(operator, viewer, customer, other_tenant, node_in, case_on):
    case = case_on(node_in(S.TRIAGE, tenant=other_tenant))
    assert api(operator).post(f"/api/rma/{case.pk}/ship/", {}).status_code == 400
    assert api(viewer).post(f"/api/rma/{case.pk}/ship/", {"reason": "x"}).status_code == 403
    assert api(customer).post(f"/api/rma/{case.pk}/ship/", {"reason": "x"}).status_code == 404
    assert api(customer).get(f"/api/rma/{case.pk}/").status_code == 404
    node = node_in(S.TRIAGE)
    missing = api(operator).post(f"/api/nodes/{node.pk}/rma/", {"reason": "x", "vendor": "NVIDIA"}, format="json")
    assert missing.status_code == 400 and {"part", "failed_serial"} <= set(missing.json()["fields"])
    assert RmaCase.objects.count() == 1


# --- CSV exports ---------------------------------------------------------------------------
def rows(response) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_the_ticket_export_is_csv_filtered_by_state_and_scoped(operator, customer, tenant, node_in, ticket_on):
    mine = ticket_on(node_in(S.TRIAGE, tenant=tenant), "=HYPERLINK(1)", started=True)
    other = ticket_on(node_in(S.TRIAGE), "PSU 2")
    everything = rows(api(operator).get("/api/repairs/export.csv"))
    assert {r["id"] for r in everything} == {str(mine.pk), str(other.pk)}
    (started,) = rows(api(operator).get("/api/repairs/export.csv", {"state": "in_progress"}))
    assert started["component"] == "'=HYPERLINK(1)"  # never a formula in a spreadsheet
    assert started["assignee"] == "dc-tech-7" and started["rack_unit"] == "12"
    assert [r["id"] for r in rows(api(customer).get("/api/repairs/export.csv"))] == [str(mine.pk)]
    assert api(operator).get("/api/repairs/export.csv", {"state": "lost"}).status_code == 400


def test_the_rma_export_is_csv_filtered_by_state(operator, node_in, case_on, client):
    returned = case_on(node_in(S.TRIAGE), to="returned")
    case_on(node_in(S.TRIAGE))
    (row,) = rows(api(operator).get("/api/rma/export.csv", {"state": "returned"}, HTTP_ACCEPT="text/csv"))
    assert (row["id"], row["vendor_case_number"], row["replacement_serial"], row["outcome"]) == (
        str(returned.pk),
        "C-42",
        "1650999",
        "replaced",
    )
    assert client.get("/api/rma/export.csv").status_code in (401, 403)  # anonymous


# --- Bounded queries ------------------------------------------------------------------------
def queries_for(user, url: str) -> int:  # type: ignore[no-untyped-def]
    client = api(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        assert response.status_code == 200
        if response.streaming:  # the CSV rows are read while the body streams
            b"".join(response.streaming_content)
    return len(ctx.captured_queries)


@pytest.mark.parametrize("persona", ["operator", "customer"])
def test_the_api_lists_cost_the_same_for_3_and_30_rows(request, persona, tenant, node_in, ticket_on, case_on):
    user = request.getfixturevalue(persona)

    def add(count: int) -> None:
        for _ in range(count):
            node = node_in(S.TRIAGE, tenant=tenant)
            ticket_on(node, started=True)
            case_on(node, to="shipped")

    add(3)
    urls = ["/api/repairs/", "/api/rma/", "/api/repairs/export.csv", "/api/rma/export.csv"]
    few = [queries_for(user, url) for url in urls]
    add(27)
    assert [queries_for(user, url) for url in urls] == few
