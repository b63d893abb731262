"""Outage rows: kept in step with every recorded state change, rewritten whole by ``rebuild``, and
read by the reports with the same figures as deriving the outages from the state changes."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.forms.models import model_to_dict

from nodes import services as node_services
from nodes.admin import NodeAdmin
from nodes.models import Node
from nodes.services import Actor
from reports import outages
from reports.models import Outage

from .conftest import NOW, D, H, change

pytestmark = pytest.mark.django_db

PERIODS = [
    (NOW - 7 * D, NOW),
    (NOW - 3 * D, NOW),
    (NOW - 30 * D, NOW),
    (NOW - 7 * D, NOW - 3 * D + 3 * H),
    (NOW - 6 * D + 2 * H, NOW - D + H),
    (NOW - 50 * D, NOW - 7 * D),
]


def _rows():
    return sorted(
        Outage.objects.values_list(
            "node_id", "started", "ended", "hardware_at", "initiating_event_id", "init_kind", "init_name", "cluster_id"
        )
    )


@pytest.mark.parametrize(("since", "until"), PERIODS)
def test_stored_outages_read_like_the_state_changes(week, since, until):
    scopes = [
        outages.Scope(),
        outages.Scope(cluster_id=week.east.pk),
        outages.Scope(tenant_id=week.globex.pk),
        outages.Scope(node_ids=[week.a.pk, week.b.pk]),
        outages.Scope(node_ids=[]),
    ]
    for scope in scopes:
        assert outages.outages(scope, since, until) == outages.outages(scope, since, until, live=True)
        assert outages.outages(scope, since, until, limit=2, offset=1) == outages.outages(
            scope, since, until, limit=2, offset=1, live=True
        )


def test_each_recorded_state_change_rewrites_its_nodes_rows(week):
    assert Outage.objects.filter(node=week.e).count() == 0
    change(week.e, NOW - 2 * D, "production", "triage", actor="operator", reason="looks odd")
    [row] = Outage.objects.filter(node=week.e)
    assert (row.started, row.ended, row.hardware_at, row.init_name) == (NOW - 2 * D, None, None, "operator")
    change(week.e, NOW - 2 * D + H, "triage", "repair", actor="operator")
    change(week.e, NOW - D, "repair", "production", actor="technician")
    [row] = Outage.objects.filter(node=week.e)
    assert (row.ended, row.hardware_at) == (NOW - D, NOW - 2 * D + H)


def test_a_drain_is_initiated_by_whoever_asked_for_it(week):
    [row] = Outage.objects.filter(node=week.a, started=NOW - 3 * D + H)
    assert row.init_name == "operator" and row.initiating_event.target_state == "drain_pending"


def test_rebuild_is_idempotent_and_matches_the_rows_kept_up_to_date(week):
    kept = _rows()
    assert kept and outages.rebuild() == len(kept)
    assert _rows() == kept
    outages.rebuild()
    outages.rebuild([week.a.pk])
    assert _rows() == kept
    Outage.objects.all().delete()
    outages.rebuild([week.a.pk, week.c.pk])
    assert _rows() == [r for r in kept if r[0] in (week.a.pk, week.c.pk)]


def _downtime_by_the_nodes_cluster_now(since, until):
    """The reference: the outages derived from the state changes, by the cluster of each node now."""
    from collections import Counter

    from nodes.models import Node

    clusters = dict(Node.objects.values_list("pk", "cluster_id"))
    counts, seconds = Counter(), Counter()
    for o in outages.outages(outages.Scope(), since, until, live=True):
        counts[(clusters[o.node_id], o.attribution)] += 1
        seconds[(clusters[o.node_id], o.attribution)] += o.seconds
    return {key: (counts[key], pytest.approx(seconds[key])) for key in counts}


def _downtime(since, until):
    return {
        (r["cluster_id"], r["attribution"]): (r["outages"], r["seconds"])
        for r in outages.downtime_by_attribution(outages.Scope(), since, until)
    }


@pytest.mark.parametrize(("since", "until"), PERIODS)
def test_downtime_per_cluster_reads_the_rows_copy_of_the_nodes_cluster(week, since, until):
    assert _downtime(since, until) == _downtime_by_the_nodes_cluster_now(since, until)


def test_a_transition_made_by_the_lifecycle_service_rewrites_its_nodes_rows(week):
    # nodes.services records the change and runs the recorders reports declared in nodes.followups.
    asked = node_services.request_drain(week.e.pk, actor=Actor.system("test"), reason="maintenance")
    assert not Outage.objects.filter(node=week.e).exists()  # drain pending: still in service
    draining = node_services.start_draining(week.e.pk, actor=Actor.system("test"), reason="idle")
    [row] = Outage.objects.filter(node=week.e)
    assert (row.initiating_event_id, row.started, row.ended) == (asked.pk, draining.created, None)


def _move_in_the_admin(node, cluster, user, rf):
    """The admin's change form saving the node with another cluster (the only place it is edited)."""
    node_admin = NodeAdmin(Node, admin.site)
    request = rf.post("/")
    request.user = user
    form_class = node_admin.get_form(request, node, change=True)
    data = {k: "" if v is None else v for k, v in model_to_dict(node, fields=form_class.base_fields).items()}
    form = form_class({**data, "cluster": cluster.pk if cluster else ""}, instance=Node.objects.get(pk=node.pk))
    assert form.is_valid(), form.errors
    node_admin.save_model(request, form.save(commit=False), form, change=True)


def test_a_node_moved_to_another_cluster_takes_its_outages_along(week, fleet_admin, rf):
    _move_in_the_admin(week.a, week.west, fleet_admin, rf)
    assert set(Outage.objects.filter(node=week.a).values_list("cluster_id", flat=True)) == {week.west.pk}
    _move_in_the_admin(week.a, None, fleet_admin, rf)
    assert set(Outage.objects.filter(node=week.a).values_list("cluster_id", flat=True)) == {None}
    for since, until in PERIODS:
        assert _downtime(since, until) == _downtime_by_the_nodes_cluster_now(since, until)
