"""``manage.py seed_demo``: a plausible fleet whose history obeys the state machine and replays to its snapshots."""

from __future__ import annotations

import io
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from fleet.choices import SchedulerKind
from fleet.models import Cluster, Rack, Site, Tenant, TenantMembership
from nodes import services
from nodes.charts import lifecycle_edges
from nodes.choices import EventKind, NodeState
from nodes.models import GPU, Node, NodeEvent, StateCountSnapshot
from nodes.roles import FLEET_ADMINS, OPERATORS
from sandbox import demo
from trends.models import TrendRun

S = NodeState
NOW = datetime(2026, 3, 14, 15, 30, tzinfo=UTC)
GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# (source, transition) -> target, as declared on Node: history must only use these roads.
# (source, verb) -> the states the state machine lets it reach (complete_drain: triage or maintenance).
ROADS: dict[tuple[str, str], set[str]] = {}
for _source, _target, _name in lifecycle_edges():
    ROADS.setdefault((_source, _name), set()).add(_target)

pytestmark = pytest.mark.django_db


def seed(*args: str) -> str:
    out = io.StringIO()
    with time_machine.travel(NOW, tick=False):
        call_command("seed_demo", "--nodes", "60", "--days", "30", "--seed", "7", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def seeded() -> str:
    return seed()


def transitions(node: Node) -> list[NodeEvent]:
    return list(NodeEvent.objects.filter(node=node, kind=EventKind.TRANSITION).order_by("created", "id"))


def test_it_builds_two_sites_four_clusters_three_tenants_and_unassigned_capacity(seeded):
    assert Site.objects.count() == 2
    assert Cluster.objects.count() == 4
    assert {c.scheduler_kind for c in Cluster.objects.all()} == set(
        SchedulerKind.values
    )  # the product's kinds, none simulated
    assert Tenant.objects.count() == 3
    assert Node.objects.count() == 60
    assert Node.objects.filter(tenant__isnull=True).exists()
    assert set(Node.objects.exclude(tenant=None).values_list("tenant__slug", flat=True)) == {
        "helios",
        "northwind",
        "quanta",
    }
    assert Rack.objects.count() >= 60 // demo.NODES_PER_RACK
    assert {n.hardware_profile.name for n in Node.objects.select_related("hardware_profile")} == {
        "HGX H100 8-GPU",
        "HGX H200 8-GPU",
    }
    assert set(Node.objects.values_list("persona__name", flat=True)) == {"training", "inference"}


def test_every_node_state_is_present_and_most_nodes_are_in_production(seeded):
    counts = Counter(Node.objects.values_list("state", flat=True))
    assert set(counts) == set(NodeState.values)
    assert counts[S.PRODUCTION] > 0.7 * 60


def test_every_node_has_eight_gpus_with_nvidia_uuids(seeded):
    assert GPU.objects.count() == 8 * 60
    assert all(GPU_UUID.match(u) for u in GPU.objects.values_list("uuid", flat=True))
    assert all(len(serial) == 13 for serial in GPU.objects.values_list("serial", flat=True))
    assert set(Counter(GPU.objects.values_list("node_id", flat=True)).values()) == {8}


def test_each_nodes_history_follows_the_state_machine_and_ends_in_its_state(seeded):
    for node in Node.objects.all():
        events = transitions(node)
        state = S.ENROLLED
        for event in events:
            assert event.source_state == state, f"{node}: {event} does not start where the last one ended"
            assert event.target_state in ROADS.get((event.source_state, event.transition), ()), f"{node}: {event}"
            state = event.target_state
        assert state == node.state
        assert node.state_changed_at == (events[-1].created if events else node.created)
        times = [e.created for e in NodeEvent.objects.filter(node=node).order_by("created", "id")]
        assert times == sorted(times) and times[-1] <= NOW
        assert node.created == times[0] >= NOW - timedelta(days=30)


def test_findings_name_realistic_causes_and_actors_mix_system_and_people(seeded):
    findings = NodeEvent.objects.filter(kind=EventKind.FINDING)
    assert findings.exists()
    assert {f.details["cause"] for f in findings} <= {c.key for c in demo.CAUSES}
    assert any(re.match(r"XID \d+ on GPU \d", f.reason) for f in findings)
    actors = set(NodeEvent.objects.values_list("actor_name", flat=True))
    assert {"system:provisioner", "system:validation", "operator"} <= actors
    people = NodeEvent.objects.filter(actor_kind="user")
    assert people.exists() and all(e.actor.username == e.actor_name for e in people)


def test_nodes_walking_day_1_again_after_a_repair_are_flagged_as_revalidating(seeded):
    assert Node.objects.filter(is_revalidation=True).exists()
    for node in Node.objects.all():
        walks = [
            e.transition
            for e in transitions(node)
            if e.transition in ("start_validation", "revalidate", "release_to_production")
        ]
        assert node.is_revalidation == (bool(walks) and walks[-1] == "revalidate"), node


def test_snapshots_replay_the_history(seeded):
    times = sorted(set(StateCountSnapshot.objects.values_list("taken_at", flat=True)))
    assert times[0] <= NOW - timedelta(days=29)
    assert len([t for t in times if t > NOW - timedelta(hours=48)]) == 48  # hourly for two days
    for taken_at in (times[len(times) // 2], times[-1]):
        expected: Counter[tuple[str, int | None, int | None]] = Counter()
        for node in Node.objects.filter(created__lte=taken_at):
            before = [e for e in transitions(node) if e.created <= taken_at]
            state = before[-1].target_state if before else S.ENROLLED
            expected[(state, node.cluster_id, node.tenant_id)] += 1
        rows = StateCountSnapshot.objects.filter(taken_at=taken_at)
        assert {(r.state, r.cluster_id, r.tenant_id): r.count for r in rows} == expected


def test_seeding_again_does_nothing(seeded):
    events = NodeEvent.objects.count()
    assert "already exists" in seed()
    assert Node.objects.count() == 60 and NodeEvent.objects.count() == events


def test_reset_rebuilds_the_same_fleet_from_the_same_seed(seeded):
    before = list(Node.objects.order_by("hostname").values_list("hostname", "state", "state_changed_at"))
    uuids = set(GPU.objects.values_list("uuid", flat=True))
    seed("--reset")
    assert list(Node.objects.order_by("hostname").values_list("hostname", "state", "state_changed_at")) == before
    assert set(GPU.objects.values_list("uuid", flat=True)) == uuids
    assert NodeEvent.objects.filter(node=None).count() == 0


def test_demo_logins_work(seeded, client):
    User = get_user_model()  # noqa: N806 - Django's name for the user model
    admin, operator, viewer = (User.objects.get(username=u) for u in ("admin", "operator", "viewer"))
    assert admin.is_superuser and admin.is_staff and admin.groups.filter(name=FLEET_ADMINS).exists()
    assert operator.is_staff and not operator.is_superuser and operator.groups.filter(name=OPERATORS).exists()
    assert viewer.is_staff and not viewer.groups.exists()
    customers = TenantMembership.objects.select_related("user")
    assert customers.count() == 3 and not any(m.user.is_staff for m in customers)
    # Through the login form, as a person signs in (django-axes' backend needs the request).
    for username in ("operator", "helios-user"):
        response = client.post("/login/", {"username": username, "password": demo.DEMO_PASSWORD})
        assert response.status_code == 302 and response.wsgi_request.user.get_username() == username
    assert "nodewarden-demo" in seeded and "helios-user" in seeded


def test_seeded_nodes_keep_moving_through_the_services(seeded):
    node = Node.objects.filter(state=S.PRODUCTION).first()
    services.request_drain(node.pk, actor=services.Actor.system("test"), reason="after seeding")
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING and transitions(node)[-1].source_state == S.PRODUCTION


def test_it_refuses_a_fleet_too_small_or_a_window_too_short(db):
    with pytest.raises(CommandError):
        call_command("seed_demo", "--nodes", "2", stdout=io.StringIO())
    with pytest.raises(CommandError):
        call_command("seed_demo", "--days", "3", stdout=io.StringIO())


def test_seeding_runs_the_trends_evaluation_once_so_the_trends_page_is_not_empty(seeded, client):
    run = TrendRun.objects.get()  # the page's last finished run, as the beat's daily task writes it
    assert run.finished is not None and not run.error and run.nodes > 50  # the fleet less its retired nodes
    assert f"trend run {run.pk}" in seeded
    client.force_login(get_user_model().objects.get(username="operator"))
    page = client.get("/trends/").content.decode()
    assert "No evaluation has run yet" not in page and f"over {run.nodes} nodes" in page
