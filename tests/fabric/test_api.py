"""Fabric API: plan import (JSON or text/csv, errors by line), upload of real infiniband-diags
output end to end (a pulled cable becomes a link_down ticket on both ends), runs, links,
discrepancies, tickets (close), manual validations; staff only; bounded queries."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from fabric import services
from fabric.choices import DiscrepancyKind as K
from fabric.choices import TicketStatus
from fabric.models import CablingPlan, DiscoveryOutput, DiscoveryRun, FabricDevice, Ticket
from fabric.plan import import_plan
from fabric.validation import Port, Seen
from health.models import Finding
from nodes.services import Actor
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
TESTS = Actor.system("tests")
IB = Path(__file__).parent / "fixtures"  # the captured outputs of shared/reference/ib (ibsim fabric)

# The captured 4-host fabric as designed: leaf01 and leaf02 with two hosts each, two uplinks
# each to spine01, and the management host ufm01 on spine01/8. 4X HDR trains at 212.5 Gb/s.
REFERENCE_PLAN = """a_device,a_port,b_device,b_port,width,rate_gbps
gpu-node-01 mlx5_0,1,leaf01,1,4X,200
gpu-node-02 mlx5_0,1,leaf01,2,4X,200
gpu-node-03 mlx5_0,1,leaf02,1,4X,200
gpu-node-04 mlx5_0,1,leaf02,2,4X,200
leaf01,7,spine01,1,4X,200
leaf01,8,spine01,2,4X,200
leaf02,7,spine01,3,4X,200
leaf02,8,spine01,4,4X,200
ufm01 mlx5_0,1,spine01,8,4X,200
"""


def ib(name: str) -> str:
    return (IB / name).read_text()


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def reference(db):
    """The reference fabric's nodes and plan."""
    nodes = {f"gpu-node-0{i}": NodeFactory(hostname=f"gpu-node-0{i}") for i in range(1, 5)}
    import_plan(REFERENCE_PLAN, actor=TESTS, source="reference.csv")
    return nodes


def upload(client: APIClient, linkinfo: str = "iblinkinfo.txt", **extra):
    return client.post(
        "/api/fabric/discoveries/",
        {"ibnetdiscover": ib("ibnetdiscover.txt"), "iblinkinfo": ib(linkinfo), **extra},
        format="json",
    )


# --- Plans --------------------------------------------------------------------------------------


def test_a_plan_posted_as_json_or_as_csv_becomes_the_plan_in_force(operator):
    client = api(operator)

    as_json = client.post("/api/fabric/plans/", {"csv": REFERENCE_PLAN, "note": "as built"}, format="json")
    as_csv = client.post("/api/fabric/plans/", REFERENCE_PLAN.encode(), content_type="text/csv")

    assert as_json.status_code == 201 and as_json.json()["links"] == 9 and as_json.json()["note"] == "as built"
    assert as_csv.status_code == 201 and as_csv.json()["source"] == "API (text/csv)"
    listed = client.get("/api/fabric/plans/").json()
    assert [p["id"] for p in listed["results"]] == [as_csv.json()["id"], as_json.json()["id"]]
    assert CablingPlan.objects.first().pk == as_csv.json()["id"]


def test_a_bad_plan_is_refused_with_every_bad_line(operator):
    bad = "a_device,a_port,b_device,b_port,width\nleaf01,1,spine01,1,4X\nleaf01,2,spine01,2,5X\nleaf01,1,spine01,3,\n"

    response = api(operator).post("/api/fabric/plans/", {"csv": bad}, format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"line": 3, "message": "width must be one of 1X, 2X, 4X, 8X, 12X, not '5X'"},
        {"line": 4, "message": "leaf01/1 is already cabled on line 2"},
    ]
    assert not CablingPlan.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type", "field"),
    [
        (b'{"note": "no csv"}', "application/json", "csv"),
        (b"\xff\xfe\x00", "text/csv", "detail"),
        (b"{not json", "application/json", "detail"),
    ],
)
def test_an_unreadable_plan_body_is_a_400_not_a_500(operator, body, content_type, field):
    response = api(operator).post("/api/fabric/plans/", body, content_type=content_type)
    body = response.json()
    assert response.status_code == 400 and (field in body["fields"] if field != "detail" else body["fields"] == {})


# --- Discovery upload, end to end -----------------------------------------------------------------


def test_the_captured_healthy_fabric_matches_its_plan(operator, reference):
    response = upload(api(operator), perfquery=[ib("perfquery-lid5-port1.txt")], ibqueryerrors=ib("ibqueryerrors.txt"))

    assert response.status_code == 201, response.json()
    run = response.json()
    assert run["source"] == "upload" and run["status"] == "done" and run["actor_name"] == "operator"
    assert run["devices"] == 8 and run["links"] == 9
    assert run["summary"]["discrepancies"] == 0 and run["summary"]["planned_links"] == 9
    assert run["tools"] == ["iblinkinfo", "ibnetdiscover", "ibqueryerrors", "perfquery[0]"]
    assert DiscoveryOutput.objects.get(run_id=run["id"], tool="iblinkinfo").text == ib("iblinkinfo.txt")
    assert FabricDevice.objects.get(name="leaf02").guid == "0x0002c90300001002"
    counters = DiscoveryRun.objects.get(pk=run["id"]).counter_snapshots.get()
    assert (counters.device.name, counters.port, counters.counters["port_xmit_data"]) == ("gpu-node-01 mlx5_0", 1, 1656)
    assert not Ticket.objects.exists()


def test_a_pulled_cable_becomes_a_link_down_ticket_on_both_ends_and_closes_when_relinked(operator, reference):
    client = api(operator)
    upload(client)

    pulled = upload(client, "iblinkinfo-after-unlink-gpu-node-03.txt")

    assert pulled.status_code == 201
    assert pulled.json()["summary"]["by_kind"] == {K.LINK_DOWN: 1}
    (ticket,) = client.get("/api/fabric/tickets/").json()["results"]
    assert ticket["kind"] == K.LINK_DOWN and ticket["status"] == TicketStatus.OPEN
    assert ticket["endpoints"] == ["gpu-node-03 mlx5_0/1", "leaf02/1"]
    assert ticket["nodes"] == [{"id": reference["gpu-node-03"].pk, "hostname": "gpu-node-03"}]
    assert "leaf02/1 Down/Polling" in ticket["detail"]
    assert Finding.objects.filter(node=reference["gpu-node-03"], rule=services.FINDING_RULE).exists()
    (found,) = client.get("/api/fabric/discrepancies/").json()["results"]
    assert (found["a_endpoint"], found["b_endpoint"], found["ticket"]) == (
        "gpu-node-03 mlx5_0/1",
        "leaf02/1",
        ticket["id"],
    )
    down = client.get("/api/fabric/links/", {"device": "leaf02"}).json()["results"]
    assert {(d["a_port"], d["b_device"], d["state"]) for d in down} >= {
        (1, None, "Down"),
        (2, "gpu-node-04 mlx5_0", "Active"),
    }

    relinked = upload(client, "iblinkinfo-after-relink.txt")
    assert relinked.json()["summary"]["tickets_closed"] == 1
    assert client.get(f"/api/fabric/tickets/{ticket['id']}/").json()["status"] == TicketStatus.CLOSED


def test_rising_counters_from_ibqueryerrors_open_a_counter_ticket(operator, reference):
    response = upload(api(operator), ibqueryerrors=ib("ibqueryerrors-after-counter-faults.txt"))

    # 1,234 symbol errors at a first look count as an hour's worth (limit 120/h); leaf01/2's
    # 17 receive errors are within theirs, and 3 link-downs at a first look are no flap yet.
    assert response.json()["summary"]["by_kind"] == {K.COUNTER_ERRORS: 1}
    assert list(Ticket.objects.values_list("title", flat=True)) == ["Error counters rising: gpu-node-02 mlx5_0/1"]
    snapshot = FabricDevice.objects.get(name="leaf01").counter_snapshots.get()
    assert (snapshot.port, snapshot.counters) == (2, {"link_downed": 3, "port_rcv_errors": 17})


@pytest.mark.parametrize(
    ("fields", "tool", "line"),
    [
        (
            {"iblinkinfo": "CA: gpu-node-04 mlx5_0:\n      0x0002c90300002009      8    1[  ] ==( 4X  garbage"},
            "iblinkinfo",
            2,
        ),
        (
            {"ibnetdiscover": 'Switch\t8 "S-0002c90300001002"\t\t# "leaf02" base port 0 lid 4 lmc 0\n[1]\t"H-00'},
            "ibnetdiscover",
            2,
        ),
        (
            {"perfquery": ["# Port counters: Lid 5 port 1 (CapMask: 0x1200)\nSymbolErrorCounter:....x\n"]},
            "perfquery[0]",
            2,
        ),
        (
            {"perfquery": ["# Port counters: Lid 99 port 1 (CapMask: 0x1200)\nSymbolErrorCounter:....0\n"]},
            "perfquery[0]",
            1,
        ),
        (
            {"ibqueryerrors": 'Errors for "x"\n   GUID 0x2c90300002005 port 1: [SymbolErrorCounter == 1]\n'},
            "ibqueryerrors",
            0,
        ),
    ],
)
def test_malformed_tool_output_is_refused_naming_the_tool_and_line(operator, reference, fields, tool, line):
    response = upload(api(operator), **fields)

    assert response.status_code == 400, response.json()
    (error,) = response.json()["errors"]
    assert (error["tool"], error["line"]) == (tool, line) and error["message"]
    assert not DiscoveryRun.objects.exists()


def test_an_upload_without_the_topology_is_refused(operator):
    response = api(operator).post("/api/fabric/discoveries/", {"iblinkinfo": "x"}, format="json")
    assert response.status_code == 400 and "ibnetdiscover" in response.json()["fields"]


# --- Runs, tickets, validations ---------------------------------------------------------------------


def test_runs_are_listed_newest_first_and_filtered_by_source(operator, reference):
    client = api(operator)
    first = upload(client).json()
    services.record_run(None, {Port("leaf01", 7): {"symbol_error": 0}}, source="agents", actor=TESTS)

    listed = client.get("/api/fabric/runs/").json()["results"]
    uploads = client.get("/api/fabric/runs/", {"source": "upload"}).json()["results"]

    assert [r["source"] for r in listed] == ["agents", "upload"]
    assert [r["id"] for r in uploads] == [first["id"]]
    assert client.get(f"/api/fabric/runs/{first['id']}/").json()["summary"]["discrepancies"] == 0


def test_an_operator_closes_a_ticket_with_a_reason(operator, viewer, reference):
    upload(api(operator), "iblinkinfo-after-unlink-gpu-node-03.txt")
    ticket = Ticket.objects.get()
    url = f"/api/fabric/tickets/{ticket.pk}/close/"

    assert api(operator).post(url, {"reason": " "}, format="json").status_code == 400
    assert api(viewer).post(url, {"reason": "planned move"}, format="json").status_code == 403
    closed = api(operator).post(url, {"reason": "planned move"}, format="json")

    assert closed.status_code == 200 and closed.json()["status"] == TicketStatus.CLOSED
    assert closed.json()["closed_reason"] == "Closed by operator: planned move"
    assert api(operator).post("/api/fabric/tickets/999999/close/", {"reason": "x"}, format="json").status_code == 404


def test_manual_validations_are_recorded_with_who_and_listed(operator, viewer):
    created = api(operator).post(
        "/api/fabric/validations/", {"scope": "spine01 uplinks", "result": "passed"}, format="json"
    )
    refused = api(operator).post("/api/fabric/validations/", {"scope": "", "result": "sort of"}, format="json")

    assert created.status_code == 201 and created.json()["actor_name"] == "operator"
    assert refused.status_code == 400 and set(refused.json()["fields"]) == {"scope", "result"}
    assert (
        api(viewer).post("/api/fabric/validations/", {"scope": "x", "result": "passed"}, format="json").status_code
        == 403
    )
    assert [v["scope"] for v in api(viewer).get("/api/fabric/validations/").json()["results"]] == ["spine01 uplinks"]


# --- Scoping and cost -------------------------------------------------------------------------------

READS = [
    "/api/fabric/plans/",
    "/api/fabric/runs/",
    "/api/fabric/discrepancies/",
    "/api/fabric/links/",
    "/api/fabric/tickets/",
    "/api/fabric/validations/",
]


def test_the_fabric_api_is_for_staff_only(customer, reference):
    for url in READS:
        assert APIClient().get(url).status_code in (401, 403), url
        assert api(customer).get(url).status_code == 404, url
    assert api(customer).post("/api/fabric/plans/", {"csv": REFERENCE_PLAN}, format="json").status_code == 404
    assert api(customer).post("/api/fabric/discoveries/", {}, format="json").status_code == 404
    assert CablingPlan.objects.count() == 1


def pulled_cables(count: int, start: int) -> None:
    """``count`` more planned cables (and nodes), each seen down: a ticket, a discrepancy, a down port each."""
    for i in range(start, start + count):
        NodeFactory(hostname=f"gpu-{i:03d}")
    plan = "a_device,a_port,b_device,b_port\n" + "".join(
        f"gpu-{i:03d} mlx5_0,1,leaf-q,{i}\n" for i in range(1, start + count)
    )
    import_plan(plan, actor=TESTS)
    down = {Port("leaf-q", i): "Down/Polling" for i in range(1, start + count)}
    services.record_run(
        Seen(down_ports=down, devices={"leaf-q"}), {Port("leaf-q", 1): {"symbol_error": 0}}, actor=TESTS
    )


def queries_for(user, url: str) -> int:
    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


@pytest.mark.parametrize("url", READS)
def test_the_lists_cost_the_same_for_3_and_30_rows(operator, url):
    pulled_cables(3, start=1)
    few = queries_for(operator, url)
    pulled_cables(27, start=4)
    # user, permissions, (the last run), count, page, (one prefetch): the same for any size
    assert queries_for(operator, url) == few <= 7
