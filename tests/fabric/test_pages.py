"""Fabric pages: overview (topology, tiles, runs chart, plan upload with errors by line),
discrepancies, tickets (close with a reason), a port's page, manual validations; staff only;
bounded queries; the topology figure stays small for a 2,000-host fabric."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from fabric import charts, services
from fabric.choices import DeviceKind, DeviceRole, TicketStatus
from fabric.models import (
    CablingPlan,
    DiscoveredLink,
    DiscoveryRun,
    FabricDevice,
    ManualValidation,
    PlannedLink,
    Ticket,
)
from fabric.plan import import_plan
from fabric.validation import Port, Seen, SeenLink
from nodes.services import Actor
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
TESTS = Actor.system("tests")

PLAN_CSV = """a_device,a_port,b_device,b_port,width,rate_gbps
gpu-01 mlx5_0,1,leaf01,1,4X,400
gpu-02 mlx5_0,1,leaf01,2,4X,400
leaf01,7,spine01,1,4X,400
"""


def P(text: str) -> Port:  # noqa: N802 - reads like the Port it builds: P('leaf01/3')
    device, port = text.rsplit("/", 1)
    return Port(device, int(port))


def fabric_seen(pulled: bool = False) -> Seen:
    """The small fabric as planned, or with gpu-02's cable pulled (leaf01/2 Down/Polling)."""
    links = [
        SeenLink(P("gpu-01 mlx5_0/1"), P("leaf01/1"), "4X", 400.0),
        SeenLink(P("leaf01/7"), P("spine01/1"), "4X", 400.0),
    ]
    seen = Seen(links=links, devices={"gpu-01 mlx5_0", "leaf01", "spine01"})
    if pulled:
        seen.down_ports[P("leaf01/2")] = "Down/Polling"
    else:
        seen.links.append(SeenLink(P("gpu-02 mlx5_0/1"), P("leaf01/2"), "4X", 400.0))
        seen.devices.add("gpu-02 mlx5_0")
    return seen


@pytest.fixture
def fabric(db):
    """A planned fabric, a clean run, then a run with a pulled cable (one link_down ticket), with counters."""
    NodeFactory(hostname="gpu-02")
    import_plan(PLAN_CSV, actor=TESTS, source="plan.csv")
    now = timezone.now()
    services.record_run(
        fabric_seen(), {P("leaf01/7"): {"symbol_error": 0, "link_downed": 0}}, actor=TESTS, now=now - timedelta(hours=2)
    )
    return services.record_run(
        fabric_seen(pulled=True),
        {P("leaf01/7"): {"symbol_error": 5, "link_downed": 1}},
        actor=TESTS,
        now=now - timedelta(hours=1),
    )


def pages(ticket: Ticket | None = None) -> list[str]:
    urls = [
        reverse(name) for name in ("fabric-overview", "fabric-discrepancies", "fabric-tickets", "fabric-validations")
    ]
    leaf = FabricDevice.objects.filter(name="leaf01").first()
    if leaf:
        urls.append(reverse("fabric-link", args=(leaf.pk, 2)))
    if ticket:
        urls.append(reverse("fabric-ticket", args=(ticket.pk,)))
    return urls


# --- Rendering and scoping --------------------------------------------------------------------


def test_every_page_renders_empty(client, operator):
    client.force_login(operator)
    for url in pages():
        assert client.get(url).status_code == 200, url
    html = client.get(reverse("fabric-overview")).content.decode()
    assert "No discovery run yet" in html and "No cabling plan yet" in html and 'id="plan-upload"' in html
    assert "No ticket matches." in client.get(reverse("fabric-tickets")).content.decode()
    assert "No discrepancy matches." in client.get(reverse("fabric-discrepancies")).content.decode()


def test_every_page_renders_with_a_pulled_cable(client, operator, fabric):
    ticket = Ticket.objects.get()
    client.force_login(operator)
    for url in pages(ticket):
        assert client.get(url).status_code == 200, url

    overview = client.get(reverse("fabric-overview"))
    html = overview.content.decode()
    assert 'data-kind="link_down"><span class="count">1</span>' in html
    assert 'id="fabric-open-tickets"><span class="count">1</span>' in html
    assert f"#{fabric.pk}" in html and "plan.csv" in html
    assert "Fabric</a>" in html  # the nav link, for staff
    assert [t["name"] for t in overview.context["runs_chart"]["data"]] == ["Link down"]

    tickets = client.get(reverse("fabric-tickets")).content.decode()
    assert "Link down: gpu-02 mlx5_0/1 &lt;-&gt; leaf01/2" in tickets and "gpu-02</a>" in tickets
    assert 'aria-label="Close reason"' in tickets

    detail = client.get(reverse("fabric-ticket", args=(ticket.pk,))).content.decode()
    leaf = FabricDevice.objects.get(name="leaf01")
    assert reverse("fabric-link", args=(leaf.pk, 2)) in detail and "leaf01/2 Down/Polling" in detail


def test_the_port_page_shows_planned_and_seen_peers_counters_flaps_and_tickets(client, operator, fabric):
    client.force_login(operator)
    leaf = FabricDevice.objects.get(name="leaf01")

    pulled = client.get(reverse("fabric-link", args=(leaf.pk, 2)))
    uplink = client.get(reverse("fabric-link", args=(leaf.pk, 7)))

    html = pulled.content.decode()
    assert "gpu-02 mlx5_0/1" in html and "Down/Polling</span>, no peer" in html
    assert "Link down: gpu-02 mlx5_0/1" in html
    html = uplink.content.decode()
    assert "spine01/1" in html and "No ticket ever named this port." in html
    assert "<td>1</td>" in html  # the flap: link_downed 0 -> 1
    traces = {t["name"]: t["y"] for t in uplink.context["counter_chart"]["data"]}
    assert traces == {"symbol_error": [0, 5], "link_downed": [0, 1]}
    assert client.get(reverse("fabric-link", args=(leaf.pk, 300))).status_code == 404
    assert client.get(reverse("fabric-link", args=(999999, 1))).status_code == 404


def test_customers_never_see_the_fabric_and_strangers_are_sent_to_log_in(client, customer, fabric):
    ticket = Ticket.objects.get()
    for url in pages(ticket):
        assert client.get(url).status_code == 302, url
    client.force_login(customer)
    for url in pages(ticket):
        assert client.get(url).status_code == 404, url
    assert client.post(reverse("fabric-ticket-close", args=(ticket.pk,)), {"reason": "x"}).status_code == 404
    assert "Fabric</a>" not in client.get(reverse("fleet-overview")).content.decode()


def test_a_viewer_sees_the_fabric_but_changes_nothing(client, viewer, fabric):
    ticket = Ticket.objects.get()
    client.force_login(viewer)

    assert 'aria-label="Close reason"' not in client.get(reverse("fabric-tickets")).content.decode()
    assert 'id="plan-upload"' not in client.get(reverse("fabric-overview")).content.decode()
    assert client.post(reverse("fabric-ticket-close", args=(ticket.pk,)), {"reason": "x"}).status_code == 403
    assert client.post(reverse("fabric-validations"), {"scope": "a", "result": "passed"}).status_code == 403
    upload = SimpleUploadedFile("plan.csv", PLAN_CSV.encode())
    assert client.post(reverse("fabric-plan-upload"), {"csv_file": upload}).status_code == 403
    assert Ticket.objects.get().status == TicketStatus.OPEN


# --- Plan upload --------------------------------------------------------------------------------


def test_a_bad_plan_is_refused_on_the_page_with_every_bad_line(client, operator):
    client.force_login(operator)
    bad = "a_device,a_port,b_device,b_port\ngpu-01 mlx5_0,1,leaf01,1\ngpu-02 mlx5_0,x,leaf01,2\n,1,leaf01,3\n"

    response = client.post(reverse("fabric-plan-upload"), {"csv_file": SimpleUploadedFile("p.csv", bad.encode())})

    assert response.status_code == 400
    assert response.context["plan_errors"] == [
        (3, "a_port must be a port number from 1 to 255, not 'x'"),
        (4, "a_device is empty"),
    ]
    assert "line 3: a_port must be a port number" in response.content.decode()
    assert not CablingPlan.objects.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00garbage", "the file is not UTF-8 text"),
        (b"a,b\n1,2\n", "missing column(s) a_device"),
        (b"a_device,a_port,b_device,b_port\n", "the plan lists no cable"),
    ],
)
def test_an_unreadable_plan_gets_a_clear_message_not_a_500(client, operator, content, message):
    client.force_login(operator)
    response = client.post(reverse("fabric-plan-upload"), {"csv_file": SimpleUploadedFile("p.csv", content)})
    assert response.status_code == 400 and message in response.content.decode()
    missing_file = client.post(reverse("fabric-plan-upload"), {"note": "no file"})
    assert missing_file.status_code == 400 and "This field is required." in missing_file.content.decode()


def test_a_good_plan_becomes_the_plan_in_force(client, operator):
    client.force_login(operator)
    upload = SimpleUploadedFile("rack-3.csv", ("\ufeff" + PLAN_CSV).encode())

    response = client.post(reverse("fabric-plan-upload"), {"csv_file": upload, "note": "rack 3 recabled"}, follow=True)

    plan = CablingPlan.objects.get()
    assert (plan.links, plan.source, plan.note, plan.actor_name) == (3, "rack-3.csv", "rack 3 recabled", "operator")
    assert f"Plan {plan.pk} imported: 3 links" in response.content.decode()


# --- Discrepancies and tickets ------------------------------------------------------------------


def rows(response) -> list[str]:
    return [f"{d.kind} {d.a_endpoint}" for d in response.context["page"].object_list]


def test_the_discrepancy_list_shows_the_last_run_unless_asked(client, operator, fabric):
    client.force_login(operator)
    first = DiscoveryRun.objects.order_by("started").first()
    url = reverse("fabric-discrepancies")

    assert rows(client.get(url)) == ["link_down gpu-02 mlx5_0/1"]
    assert rows(client.get(url, {"run": first.pk})) == []
    assert rows(client.get(url, {"kind": "missing"})) == []
    assert rows(client.get(url, {"endpoint": "LEAF01/2"})) == ["link_down gpu-02 mlx5_0/1"]
    assert rows(client.get(url, {"endpoint": "spine"})) == []
    refused = client.get(url, {"run": "last", "kind": "nonsense"})
    assert refused.status_code == 200 and rows(refused) == [] and set(refused.context["errors"]) == {"run", "kind"}


def test_the_ticket_list_filters_by_status_kind_and_text(client, operator, fabric):
    client.force_login(operator)
    url = reverse("fabric-tickets")
    titles = lambda r: [t.title for t in r.context["page"].object_list]  # noqa: E731

    assert titles(client.get(url)) == ["Link down: gpu-02 mlx5_0/1 <-> leaf01/2"]
    assert titles(client.get(url, {"status": "closed"})) == []
    assert titles(client.get(url, {"kind": "missing"})) == []
    assert len(titles(client.get(url, {"q": "leaf01/2"}))) == 1
    assert titles(client.get(url, {"q": "leaf01/3"})) == []
    assert titles(client.get(url, {"status": "shut"})) == []


def test_an_operator_closes_a_ticket_with_a_reason_and_not_without(client, operator, fabric):
    ticket = Ticket.objects.get()
    client.force_login(operator)
    url = reverse("fabric-ticket-close", args=(ticket.pk,))

    blank = client.post(url, {"reason": "  "}, follow=True)
    assert "A reason is required." in blank.content.decode()
    assert Ticket.objects.get().status == TicketStatus.OPEN

    done = client.post(url, {"reason": "cable replaced", "next": reverse("fabric-tickets")}, follow=True)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED and ticket.closed_reason == "Closed by operator: cable replaced"
    assert done.redirect_chain[-1][0] == reverse("fabric-tickets")
    assert f"Ticket #{ticket.pk} closed." in done.content.decode()
    again = client.post(url, {"reason": "twice"}, follow=True)
    assert "is already closed" in again.content.decode()
    assert client.post(url, {"reason": "x", "next": "https://evil.example/"}).url == reverse(
        "fabric-ticket", args=(ticket.pk,)
    )


# --- Manual validations -------------------------------------------------------------------------


def test_an_operator_records_a_manual_validation(client, operator, fabric):
    client.force_login(operator)
    url = reverse("fabric-validations")

    response = client.post(url, {"scope": "leaf01 optics", "result": "partial", "notes": "port 2 dark"}, follow=True)
    refused = client.post(url, {"scope": " ", "result": "maybe"})

    record = ManualValidation.objects.get()
    assert (record.actor_name, record.scope, record.result, record.run) == (
        "operator",
        "leaf01 optics",
        "partial",
        fabric,
    )
    assert "Validation recorded." in response.content.decode() and "port 2 dark" in response.content.decode()
    assert refused.status_code == 400 and 'id="validation-errors"' in refused.content.decode()
    assert ManualValidation.objects.count() == 1
    assert [v.scope for v in client.get(url, {"result": "failed"}).context["page"].object_list] == []


# --- Bounded queries ----------------------------------------------------------------------------


def pulled_cables(count: int, start: int) -> None:
    """``count`` more planned cables (and nodes), each seen down: a link_down ticket and discrepancy each."""
    for i in range(start, start + count):
        NodeFactory(hostname=f"gpu-{i:03d}")
    plan = "a_device,a_port,b_device,b_port\n" + "".join(
        f"gpu-{i:03d} mlx5_0,1,leaf-q,{i}\n" for i in range(1, start + count)
    )
    import_plan(plan, actor=TESTS)
    down = {P(f"leaf-q/{i}"): "Down/Polling" for i in range(1, start + count)}
    services.record_run(Seen(down_ports=down, devices={"leaf-q"}), {}, actor=TESTS)


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("name", ["fabric-discrepancies", "fabric-tickets", "fabric-overview"])
def test_the_lists_cost_the_same_for_3_and_30_rows(client, operator, name, django_assert_max_num_queries):
    client.force_login(operator)
    pulled_cables(3, start=1)
    few = queries(client, reverse(name))
    pulled_cables(27, start=4)
    assert Ticket.objects.filter(status=TicketStatus.OPEN).count() == 30
    with django_assert_max_num_queries(few):
        client.get(reverse(name))
    # session, user, permissions x2, then the page's own: a handful, whatever the size
    assert few <= 16


# --- Figures ------------------------------------------------------------------------------------


def test_the_topology_colours_the_pulled_cable_red_and_names_its_ticket(fabric):
    figure = charts.topology(services.last_run(), CablingPlan.objects.first())
    traces = {t["name"]: t for t in figure["data"]}

    assert set(traces) == {"Links up", "In an open ticket", "Discrepancies", "Spines", "Leaves", "Hosts"}
    assert traces["Spines"]["text"] == ["spine01"] and traces["Leaves"]["text"] == ["leaf01"]
    assert traces["Hosts"]["text"] == ["gpu-01 mlx5_0", "gpu-02 mlx5_0"]
    assert traces["Hosts"]["marker"]["color"][1] == charts.TICKET  # gpu-02: in the open ticket
    assert len(traces["In an open ticket"]["x"]) == 3  # one segment: x0, x1, None
    assert "Link down: gpu-02 mlx5_0/1" in traces["Discrepancies"]["text"][0]
    assert len(traces["Links up"]["x"]) == 6  # leaf01-spine01 and gpu-01-leaf01


def test_a_planned_cable_never_seen_and_without_a_ticket_is_grey():
    devices = {
        1: {"name": "leaf01", "kind": DeviceKind.SWITCH, "role": DeviceRole.LEAF},
        2: {"name": "gpu-01 mlx5_0", "kind": DeviceKind.CA, "role": DeviceRole.HOST},
    }
    figure = charts.topology_figure(devices, [(1, 1, None, None)], [(2, 1, 1, 1)], {})
    assert [t["name"] for t in figure["data"]] == ["Down or missing", "Leaves", "Hosts"]


def test_the_topology_of_a_2000_host_fabric_stays_small(django_assert_max_num_queries):
    """16 spines, 63 leaves of 32 hosts (2,016 HCAs), 2 uplinks per leaf and spine: bulk rows."""
    spines = [FabricDevice(name=f"spine{s:02d}", kind=DeviceKind.SWITCH, role=DeviceRole.SPINE) for s in range(16)]
    leaves = [FabricDevice(name=f"leaf{f:02d}", kind=DeviceKind.SWITCH, role=DeviceRole.LEAF) for f in range(63)]
    hosts = [
        FabricDevice(name=f"gpu-{f:02d}-{h:02d} mlx5_0", kind=DeviceKind.CA, role=DeviceRole.HOST)
        for f in range(63)
        for h in range(32)
    ]
    FabricDevice.objects.bulk_create(spines + leaves + hosts, batch_size=2000)
    ids = dict(FabricDevice.objects.values_list("name", "pk"))
    run = DiscoveryRun.objects.create(source="collector", status="done", actor_name="tests")
    plan = CablingPlan.objects.create(actor_name="tests", links=0)
    links = [
        DiscoveredLink(
            run=run,
            a_device_id=ids[f"gpu-{f:02d}-{h:02d} mlx5_0"],
            a_port=1,
            b_device_id=ids[f"leaf{f:02d}"],
            b_port=h + 1,
        )
        for f in range(63)
        for h in range(32)
    ]
    links += [
        DiscoveredLink(
            run=run,
            a_device_id=ids[f"leaf{f:02d}"],
            a_port=33 + 2 * s + k,
            b_device_id=ids[f"spine{s:02d}"],
            b_port=2 * f + k + 1,
        )
        for f in range(63)
        for s in range(16)
        for k in range(2)
    ]
    DiscoveredLink.objects.bulk_create(links, batch_size=5000)
    PlannedLink.objects.bulk_create(
        [
            PlannedLink(
                plan=plan,
                a_device_id=link.a_device_id,
                a_port=link.a_port,
                b_device_id=link.b_device_id,
                b_port=link.b_port,
            )
            for link in links
        ],
        batch_size=5000,
    )
    Ticket.objects.create(
        key="link_down|x",
        kind="link_down",
        title="Link down: gpu-07-03 mlx5_0/1",
        endpoints=["gpu-07-03 mlx5_0/1", "leaf07/4"],
    )

    with django_assert_max_num_queries(4):
        figure = charts.topology(run, plan)

    names = [t["name"] for t in figure["data"]]
    assert names == ["Links up", "In an open ticket", "Discrepancies", "Spines", "Leaves", "Host groups"]
    groups = figure["data"][-1]
    assert len(groups["x"]) == 63 and groups["text"][7] == "32 hosts on leaf07"
    assert groups["marker"]["color"][7] == charts.TICKET
    points = sum(len(t["x"]) for t in figure["data"])
    assert points < 4000  # 1,008 leaf-spine pairs + 63 host groups, three numbers per line segment
    assert len(json.dumps(figure)) < 250_000


# --- Admin ----------------------------------------------------------------------------------------


def test_every_fabric_admin_page_renders_and_history_is_read_only(client, fleet_admin, fabric):
    client.force_login(fleet_admin)
    for model in (
        "fabricdevice",
        "cablingplan",
        "discoveryrun",
        "discrepancy",
        "portcountersnapshot",
        "linkflap",
        "ticket",
        "manualvalidation",
    ):
        url = reverse(f"admin:fabric_{model}_changelist")
        assert client.get(url).status_code == 200, model
        assert client.get(url, {"q": "leaf"}).status_code == 200, model
    leaf = FabricDevice.objects.get(name="leaf01")
    form = client.get(reverse("admin:fabric_fabricdevice_change", args=(leaf.pk,)))
    assert b'name="rack"' in form.content and b'name="guid"' not in form.content
    run = client.get(reverse("admin:fabric_discoveryrun_change", args=(fabric.pk,)))
    assert run.status_code == 200 and b'name="source"' not in run.content


def test_the_ticket_admin_closes_with_a_reason_only(client, fleet_admin, fabric):
    ticket = Ticket.objects.get()
    client.force_login(fleet_admin)
    url = reverse("admin:fabric_ticket_changelist")
    chosen = {"action": "close_action", "_selected_action": [ticket.pk]}

    asked = client.post(url, chosen)
    blank = client.post(url, {**chosen, "apply": "1", "reason": ""})
    assert b'name="reason"' in asked.content and b'name="reason"' in blank.content
    assert Ticket.objects.get().status == TicketStatus.OPEN

    client.post(url, {**chosen, "apply": "1", "reason": "recabled during the window"})
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.CLOSED
    assert ticket.closed_reason == "Closed by fleetadmin: recabled during the window"
