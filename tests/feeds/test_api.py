"""The cursor API over node events, and the subscription and dead-letter endpoints."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from feeds.choices import DeadLetterStatus
from feeds.models import DeadLetter, Subscription
from feeds.services import subscribe
from nodes.choices import EventKind, NodeState
from nodes.services import Actor, record_event
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.fixture
def api_as():
    def make(user):  # type: ignore[no-untyped-def]
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make


def _note(node, reason):
    return record_event(node.pk, EventKind.NOTE, actor=SYSTEM, reason=reason)


def test_the_cursor_pages_through_events_in_order_without_gaps_or_repeats_while_new_ones_arrive(
    api_as, operator, production_node
):
    made = [_note(production_node, f"n{i}").pk for i in range(7)]
    client, seen, cursor = api_as(operator), [], 0
    for round_ in range(6):
        page = client.get("/api/events/", {"after": cursor, "limit": 3}).json()
        seen += [int(e["id"]) for e in page["events"]]
        cursor = page["next_cursor"]
        made.append(_note(production_node, f"arrived during round {round_}").pk)  # new ones keep coming
    while page["events"]:
        page = client.get("/api/events/", {"after": cursor, "limit": 3}).json()
        seen += [int(e["id"]) for e in page["events"]]
        cursor = page["next_cursor"]
    assert seen == made
    again = client.get("/api/events/", {"after": cursor}).json()
    assert again == {"events": [], "next_cursor": cursor}


def test_an_event_is_a_cloudevent(api_as, operator, production_node):
    note = _note(production_node, "hello")
    (ce,) = api_as(operator).get("/api/events/", {"type": "io.nodewarden.node.note"}).json()["events"]
    assert ce["id"] == str(note.pk) and ce["specversion"] == "1.0" and ce["subject"] == production_node.hostname
    assert ce["type"] == "io.nodewarden.node.note" and ce["datacontenttype"] == "application/json"
    assert ce["data"]["reason"] == "hello"


def test_filters_by_cluster_node_and_type(api_as, operator, production_node, other_tenant):
    mine = _note(production_node, "mine")
    _note(NodeFactory(tenant=other_tenant, state=NodeState.PRODUCTION), "elsewhere")
    client = api_as(operator)
    for query in ({"cluster": "c-east"}, {"node": production_node.pk}, {"tenant": "acme"}):
        assert [e["id"] for e in client.get("/api/events/", query).json()["events"]] == [str(mine.pk)]


def test_a_customer_sees_only_its_tenants_events(api_as, customer, production_node, other_tenant):
    mine = _note(production_node, "mine")
    _note(NodeFactory(tenant=other_tenant, state=NodeState.PRODUCTION), "theirs")
    events = api_as(customer).get("/api/events/").json()["events"]
    assert [e["id"] for e in events] == [str(mine.pk)]
    assert api_as(customer).get("/api/events/", {"tenant": "globex"}).status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        {"after": "abc"},
        {"after": -1},
        {"after": 2**63},
        {"limit": 0},
        {"limit": 1001},
        {"limit": "many"},
        {"type": "io.nodewarden.node.nonsense"},
        {"node": 2**63},
        {"colour": "red"},
    ],
)
def test_a_bad_cursor_limit_or_filter_is_a_400_naming_it(api_as, operator, query):
    response = api_as(operator).get("/api/events/", query)
    assert response.status_code == 400
    assert set(response.json()["fields"]) == set(query)


def test_a_customer_subscribes_to_its_own_tenant_only(api_as, customer, tenant, other_tenant):
    client = api_as(customer)
    created = client.post("/api/event-subscriptions/", {"url": "http://93.184.215.14/hook"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["tenant"] == "acme" and len(created.json()["secret"]) >= 16
    refused = client.post(
        "/api/event-subscriptions/", {"url": "http://127.0.0.1:9/hook", "tenant": "globex"}, format="json"
    )
    assert refused.status_code == 403
    assert Subscription.objects.filter(tenant=other_tenant).count() == 0


def test_a_customer_lists_only_its_tenants_subscriptions_and_cannot_touch_others(
    api_as, customer, operator, other_tenant
):
    subscribe(customer, url="http://93.184.215.14/mine")
    theirs = subscribe(operator, url="http://127.0.0.1:9/theirs", tenant=other_tenant)
    client = api_as(customer)
    assert [s["url"] for s in client.get("/api/event-subscriptions/").json()["results"]] == [
        "http://93.184.215.14/mine"
    ]
    assert client.post(f"/api/event-subscriptions/{theirs.pk}/deactivate/").status_code == 404
    assert "secret" not in client.get("/api/event-subscriptions/").json()["results"][0]


def test_deactivate_and_redeliver_are_named_actions(api_as, operator):
    subscription = subscribe(operator, url="http://127.0.0.1:9/hook")
    client = api_as(operator)
    assert client.post(f"/api/event-subscriptions/{subscription.pk}/deactivate/").json()["active"] is False
    letter = DeadLetter.objects.create(
        subscription=subscription, event_id=1, event_type="io.nodewarden.node.note", cloudevent={"id": "1"}
    )
    assert client.get("/api/event-dead-letters/").json()["results"][0]["id"] == letter.pk
    answer = client.post(f"/api/event-dead-letters/{letter.pk}/redeliver/")
    assert answer.json()["status"] == DeadLetterStatus.QUEUED


def test_a_viewer_may_not_subscribe(api_as, viewer):
    response = api_as(viewer).post("/api/event-subscriptions/", {"url": "http://127.0.0.1:9/hook"}, format="json")
    assert response.status_code == 403


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",  # the portal itself
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://[::1]/hook",
        "http://localhost/hook",
        "ftp://93.184.215.14/hook",
    ],
)
def test_a_customer_may_not_point_a_webhook_inside_our_network(api_as, customer, url):
    refused = api_as(customer).post("/api/event-subscriptions/", {"url": url}, format="json")
    assert refused.status_code == 400, refused.json()
    assert "url" in str(refused.json())
    assert not Subscription.objects.exists()


def test_an_allowed_private_host_is_accepted_and_the_check_runs_again_before_sending(
    api_as, customer, settings, receiver, production_node
):
    from feeds import delivery
    from feeds.events import advance_horizon
    from nodes.services import Actor, perform

    settings.NODEWARDEN_FEED_PRIVATE_HOSTS = ["localhost"]
    url = receiver.url.replace("127.0.0.1", "localhost")
    created = api_as(customer).post("/api/event-subscriptions/", {"url": url}, format="json")
    assert created.status_code == 201, created.json()
    settings.NODEWARDEN_FEED_PRIVATE_HOSTS = []  # the site takes it back: nothing more is sent there
    perform(production_node.pk, "cordon", actor=Actor.system("tests"), reason="XID 79")
    advance_horizon()
    subscription = Subscription.objects.get()
    assert delivery.deliver(subscription.pk) in ("retry", "dead")
    subscription.refresh_from_db()
    assert "not a public address" in subscription.last_error
    assert receiver.attempts == []
