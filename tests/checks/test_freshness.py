"""Idle-time validation (checks/freshness.py): targets per hardware profile, the scheduler of checks
that keeps production nodes fresh, the coverage figure, and where it is shown (page, /metrics)."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from checks import freshness
from checks.models import FreshnessTarget
from checks.tasks import keep_checks_fresh
from nodes.choices import ACTIVE_KINDS, RunStatus
from nodes.models import Node, NodeEvent, Run
from tests.checks.conftest import report_health
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory

pytestmark = pytest.mark.django_db
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def passed(node, kind, ago, status=RunStatus.PASSED):
    """A finished run of ``kind`` on the node, ``ago`` before now."""
    at = timezone.now() - ago
    return Run.objects.create(node=node, kind=kind, status=status, started=at - timedelta(minutes=5), finished=at)


def fresh_node(cluster, *, idle=True, **runs):
    """A production node whose every default kind passed a day ago, except those given (kind=age or None)."""
    node = NodeFactory(cluster=cluster, production=True)
    for kind in ACTIVE_KINDS:
        age = runs.get(kind, DAY)
        if age is not None:
            passed(node, kind, age)
    if idle:
        report_health(node, processes=0)
    return node


def requests():
    return list(Run.objects.filter(kind__in=ACTIVE_KINDS, status=RunStatus.QUEUED).order_by("node__hostname"))


@pytest.fixture
def cluster(db):
    return ClusterFactory(name="east")


# --- targets


def test_a_profile_without_targets_owes_the_defaults():
    profile = HardwareProfileFactory()
    assert freshness.targets([profile.pk]) == {
        profile.pk: {
            "dcgm_diag": 7 * DAY,
            "gpu_stress": 3 * DAY,
            "nccl_test": 3 * DAY,
            "memory_test": 30 * DAY,
            "training_step": 30 * DAY,
        }
    }


def test_a_profile_overrides_one_kind_and_an_empty_age_takes_a_kind_off():
    profile, other = HardwareProfileFactory(), HardwareProfileFactory(name="L40S")
    FreshnessTarget.objects.create(profile=profile, kind="dcgm_diag", max_age=DAY)
    FreshnessTarget.objects.create(profile=profile, kind="memory_test", max_age=None)
    owed = freshness.targets([profile.pk, other.pk])
    assert owed[profile.pk] == {
        "dcgm_diag": DAY,
        "gpu_stress": 3 * DAY,
        "nccl_test": 3 * DAY,
        "training_step": 30 * DAY,
    }
    assert owed[other.pk] == freshness.DEFAULT_TARGETS


# --- the scheduler of checks


def test_it_requests_the_stalest_due_check_on_an_idle_production_node_as_the_system(cluster):
    node = fresh_node(cluster, dcgm_diag=9 * DAY, memory_test=40 * DAY)  # 9/7 = 1.29, 40/30 = 1.33
    assert keep_checks_fresh() == 1
    [run] = requests()
    assert (run.node_id, run.kind, run.requested_by) == (node.pk, "memory_test", None)
    assert run.requested_reason == "freshness: GPU memory test last passed 40 days ago, target 30 days"
    event = NodeEvent.objects.filter(node=node).latest("pk")
    assert (event.actor_name, event.details["check_requested"]) == ("system:checks:freshness", "memory_test")


def test_a_check_that_never_passed_is_the_stalest_and_only_a_pass_counts(cluster):
    node = fresh_node(cluster, dcgm_diag=9 * DAY, nccl_test=None)
    passed(node, "nccl_test", timedelta(hours=1), status=RunStatus.FAILED)
    keep_checks_fresh()
    [run] = requests()
    assert (run.kind, run.requested_reason) == (
        "nccl_test",
        "freshness: NCCL all-reduce test never passed, target 3 days",
    )


def test_it_leaves_fresh_busy_unreported_and_non_production_nodes_alone(cluster):
    fresh_node(cluster)  # nothing due
    fresh_node(cluster, idle=False, dcgm_diag=None)  # no report from its agent
    busy = fresh_node(cluster, dcgm_diag=None)
    report_health(busy, processes=2)
    stale_report = fresh_node(cluster, dcgm_diag=None)
    report_health(stale_report, processes=0, age=timedelta(minutes=5))
    triage = NodeFactory(cluster=cluster, triage=True)
    report_health(triage, processes=0)
    assert keep_checks_fresh() == 0
    assert requests() == []


def test_it_asks_the_workload_scheduler_and_requests_nothing_where_a_job_is_allocated(cluster, busy_scheduler):
    fresh_node(cluster, dcgm_diag=None)
    assert keep_checks_fresh() == 0
    assert requests() == []
    busy_scheduler.running = False
    assert keep_checks_fresh() == 1


def test_checks_never_stack_and_a_second_run_adds_nothing(cluster, operator):
    from checks.services import request_check
    from nodes.services import Actor

    mine = fresh_node(cluster, dcgm_diag=None)
    request_check(mine.pk, "gpu_stress", actor=Actor(user=operator), reason="looking at it")
    other = fresh_node(cluster, dcgm_diag=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("django.conf.settings.NODEWARDEN_FRESHNESS_SHARE", 1.0)
        assert keep_checks_fresh() == 1
        assert keep_checks_fresh() == 0
    assert [(r.node_id, r.kind) for r in requests()] == [(mine.pk, "gpu_stress"), (other.pk, "dcgm_diag")]


@pytest.mark.parametrize(("share", "under_test"), [(0.5, 2), (0.25, 1), (0.0, 0)])
def test_at_most_the_configured_share_of_idle_nodes_is_under_test(cluster, settings, share, under_test):
    settings.NODEWARDEN_FRESHNESS_SHARE = share
    for _ in range(4):
        fresh_node(cluster, dcgm_diag=None)
    busy = fresh_node(cluster, dcgm_diag=None)  # not idle: not in the pool the share is of
    report_health(busy, processes=1)
    keep_checks_fresh()
    keep_checks_fresh()  # the nodes now under test count against the share
    assert len(requests()) == under_test


def test_with_one_slot_the_stalest_node_goes_first(cluster, settings):
    settings.NODEWARDEN_FRESHNESS_SHARE = 0.25
    fresh_node(cluster, dcgm_diag=8 * DAY)  # 1.14
    stalest = fresh_node(cluster, memory_test=60 * DAY)  # 2.0
    fresh_node(cluster, nccl_test=4 * DAY)  # 1.33
    fresh_node(cluster)
    assert keep_checks_fresh() == 1
    assert [(r.node_id, r.kind) for r in requests()] == [(stalest.pk, "memory_test")]


def test_each_cluster_has_its_own_share(cluster, settings):
    settings.NODEWARDEN_FRESHNESS_SHARE = 0.25
    west = ClusterFactory(name="west")
    for c in (cluster, cluster, west, west):
        fresh_node(c, dcgm_diag=None)
    assert keep_checks_fresh() == 2
    assert sorted(r.node.cluster.name for r in requests()) == ["east", "west"]


# --- the coverage figure


@pytest.fixture
def seeded(cluster):
    """east: 2 of 3 production nodes fresh (one owes a DCGM diag); west: 1 node that never ran a
    check (on a profile that owes only the diag); a triage node is not counted."""
    fresh_node(cluster)
    fresh_node(cluster)
    fresh_node(cluster, dcgm_diag=10 * DAY)
    west = ClusterFactory(name="west")
    small = HardwareProfileFactory(name="L40S", gpu_count=4)
    for kind in ("gpu_stress", "nccl_test", "memory_test", "training_step"):
        FreshnessTarget.objects.create(profile=small, kind=kind, max_age=None)
    NodeFactory(cluster=west, production=True, hardware_profile=small)
    NodeFactory(cluster=west, triage=True)
    return cluster


def test_coverage_is_the_share_of_production_nodes_with_every_owed_check_fresh(seeded):
    items = freshness.fleet_freshness(timezone.now())
    assert [(s.name, s.nodes, s.fresh, s.stale_by_kind) for s in freshness.coverage(items, "cluster")] == [
        ("east", 3, 2, {"dcgm_diag": 1}),
        ("west", 1, 0, {"dcgm_diag": 1}),
    ]
    assert [(s.name, s.fresh, s.nodes) for s in freshness.coverage(items, "profile")] == [
        ("HGX H100 8-GPU", 2, 3),
        ("L40S", 0, 1),
    ]
    assert freshness.coverage(items, "fleet")[0].ratio == 0.5


def test_the_fleets_coverage_counted_in_the_database_is_the_per_node_one(seeded, django_assert_max_num_queries):
    """/metrics counts coverage in SQL (``fleet_coverage``): the same shares as the per-node road, on a
    fleet with ages either side of each target, failed and never-run checks, a
    kind a profile does not owe, a node without a cluster, and nodes out of production."""
    import random

    rng = random.Random(5)
    now = timezone.now()
    small = HardwareProfileFactory(name="A100", gpu_count=8)
    FreshnessTarget.objects.create(profile=small, kind="dcgm_diag", max_age=2 * DAY)
    FreshnessTarget.objects.create(profile=small, kind="memory_test", max_age=None)
    clusters = [seeded, ClusterFactory(name="north"), None]
    for i in range(40):
        profile = {"hardware_profile": small} if i % 2 else {}
        state = {"production": True} if i % 7 else {"triage": True}
        node = NodeFactory(cluster=clusters[i % 3] or seeded, **profile, **state)
        if clusters[i % 3] is None:
            Node.objects.filter(pk=node.pk).update(cluster=None)
        for kind in ACTIVE_KINDS:
            for _ in range(rng.randint(0, 2)):
                age = rng.choice([DAY, 2 * DAY, 3 * DAY, 4 * DAY, 8 * DAY, 31 * DAY])
                passed(node, kind, age)
            if rng.random() < 0.2:
                Run.objects.create(node=node, kind=kind, status=RunStatus.FAILED, finished=now)
    with django_assert_max_num_queries(3):  # the groups, the profiles' targets, the stale counts
        counted = freshness.fleet_coverage(now)
    items = freshness.fleet_freshness(now)
    for by in ("cluster", "profile", "fleet"):
        assert counted[by] == freshness.coverage(items, by), by
    assert {s.name for s in counted["cluster"]} == {"", "east", "north", "west"}
    assert any(s.stale_by_kind for s in counted["cluster"]) and any(s.fresh for s in counted["cluster"])


def test_metrics_expose_coverage_and_stale_nodes_per_kind(client, seeded, settings):
    settings.NODEWARDEN_METRICS_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]
    response = client.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    ratio = {s.labels["cluster"]: s.value for s in families["nodewarden_check_coverage_ratio"].samples}
    assert ratio == {"east": pytest.approx(2 / 3), "west": 0.0}
    stale = {(s.labels["cluster"], s.labels["kind"]): s.value for s in families["nodewarden_check_stale_nodes"].samples}
    assert stale[("east", "dcgm_diag")] == 1 and stale[("east", "nccl_test")] == 0
    profiles = {s.labels["profile"]: s.value for s in families["nodewarden_check_profile_coverage_ratio"].samples}
    assert profiles == {"HGX H100 8-GPU": pytest.approx(2 / 3), "L40S": 0.0}
    [fleet] = families["nodewarden_check_fleet_coverage_ratio"].samples
    assert fleet.value == 0.5  # 2 of the 4 production nodes, whatever their cluster or profile


def test_the_freshness_page_shows_targets_as_short_ages_with_kind_labels(client, operator, seeded):
    FreshnessTarget.objects.create(profile=HardwareProfileFactory(name="L40S"), kind="dcgm_diag", max_age=36 * HOUR)
    client.force_login(operator)
    html = client.get("/checks/freshness/").content.decode()
    section = html[html.index('id="freshness-targets"') : html.index('id="freshness-stalest"')]
    assert "DCGM diagnostics 7 d" in section and "NCCL all-reduce test 3 d" in section
    assert "DCGM diagnostics 36 h" in section  # the L40S override
    assert "days, 0:00:00" not in section and "dcgm_diag" not in section


def test_the_freshness_page_shows_coverage_to_operators(client, operator, seeded, django_assert_max_num_queries):
    client.force_login(operator)
    with django_assert_max_num_queries(12):
        response = client.get("/checks/freshness/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<span id="freshness-overall">50 %</span>' in html
    assert 'data-cluster="east"' in html and "67 %" in html
    assert "DCGM diagnostics last passed 10 days ago, target 7 days" in html
    assert 'href="/checks/freshness/"' in html  # the menu links it


def test_the_freshness_page_is_hidden_from_customers(client, customer, seeded):
    client.force_login(customer)
    assert client.get("/checks/freshness/").status_code == 404
    home = client.get("/")
    assert home.status_code == 200 and 'href="/checks/freshness/"' not in home.content.decode()


def test_against_a_real_slurm_a_node_with_a_job_allocated_gets_no_request(slurm, slurm_cluster, settings):
    settings.NODEWARDEN_FRESHNESS_SHARE = 1.0
    nodes = {}
    for name in ("gpu-s-01", "gpu-s-02"):
        nodes[name] = NodeFactory(hostname=f"{name}.dc1.example.net", cluster=slurm_cluster, production=True)
        report_health(nodes[name], processes=0)  # NVML sees nothing: a job loading its data has no GPU process yet
    job = slurm.submit("gpu-s-01", 60, "customer-train")
    slurm.wait_job_running(job)
    assert keep_checks_fresh() == 1
    assert [r.node_id for r in requests()] == [nodes["gpu-s-02"].pk]


# --- requests no agent claims


def test_a_check_queued_on_a_node_that_got_busy_takes_no_slot_of_the_share(cluster, settings):
    settings.NODEWARDEN_FRESHNESS_SHARE = 0.25
    first = fresh_node(cluster, dcgm_diag=None)
    second = fresh_node(cluster, dcgm_diag=None)
    assert keep_checks_fresh() == 1  # one slot: the first node
    report_health(first, processes=7)  # a customer job started before its agent claimed the check
    assert keep_checks_fresh() == 1  # the queued check holds nothing: the slot goes to the idle node
    assert {r.node_id for r in requests()} == {first.pk, second.pk}


def test_a_freshness_check_nobody_claims_is_withdrawn_and_asked_again_when_the_node_is_idle(cluster, settings):
    from checks.services import UNCLAIMED_FRESHNESS_MAX_AGE, expire_stale_checks

    settings.NODEWARDEN_FRESHNESS_SHARE = 0.25
    node = fresh_node(cluster, dcgm_diag=None)
    keep_checks_fresh()
    [run] = requests()
    report_health(node, processes=7)
    expire_stale_checks(timezone.now() + UNCLAIMED_FRESHNESS_MAX_AGE - timedelta(minutes=1))
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED  # not yet
    expire_stale_checks(timezone.now() + UNCLAIMED_FRESHNESS_MAX_AGE + timedelta(minutes=1))
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and "Not claimed within 30 minutes" in run.summary
    event = NodeEvent.objects.filter(node=node, details__check_cancelled="dcgm_diag").get()
    assert event.actor_name == "system:checks:freshness" and "not idle" in event.reason
    report_health(node, processes=0)
    assert keep_checks_fresh() == 1  # idle again: asked for anew


def test_an_operators_queued_check_is_never_withdrawn(cluster, operator):
    from checks.services import UNCLAIMED_FRESHNESS_MAX_AGE, expire_stale_checks, request_check
    from nodes.services import Actor

    node = fresh_node(cluster, idle=False)
    run = request_check(node.pk, "gpu_stress", actor=Actor(user=operator), reason="after the fan swap")
    expire_stale_checks(timezone.now() + 10 * UNCLAIMED_FRESHNESS_MAX_AGE)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_fleet_that_owes_no_check_is_covered_counted_in_the_database_as_per_node(cluster):
    profile = HardwareProfileFactory(name="CPU only", gpu_count=0)
    for kind in ACTIVE_KINDS:
        FreshnessTarget.objects.create(profile=profile, kind=kind, max_age=None)
    NodeFactory(cluster=cluster, production=True, hardware_profile=profile)
    NodeFactory(cluster=cluster, triage=True, hardware_profile=profile)
    now = timezone.now()
    counted = freshness.fleet_coverage(now)
    items = freshness.fleet_freshness(now)
    for by in freshness.BY:
        assert counted[by] == freshness.coverage(items, by), by
    assert [(s.nodes, s.fresh) for s in counted["fleet"]] == [(1, 1)]
