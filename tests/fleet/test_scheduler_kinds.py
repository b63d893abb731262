"""Scheduler kinds are registered by the apps that bring them; a cluster may name only those."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from fleet.choices import SchedulerKind
from fleet.models import Cluster
from fleet.schedulerkinds import scheduler_kind, scheduler_kind_choices
from schedulers.base import NoScheduler, SchedulerError, UnregisteredScheduler, adapter_for
from tests.factories import ClusterFactory, NodeFactory, SiteFactory

pytestmark = pytest.mark.django_db


def test_the_product_registers_slurm_and_kubernetes_and_the_sandbox_its_simulator():
    values = [value for value, _ in scheduler_kind_choices()]
    assert {"slurm", "kubernetes", "none"} <= set(values) and values[-1] == "none"
    # Registered by sandbox.simulator's AppConfig.ready (the test suite runs on sandbox.settings).
    assert scheduler_kind("simulated") is not None
    assert "simulated" not in SchedulerKind.values  # the product's enum does not know it


def test_each_registered_kind_builds_its_own_adapter():
    for value, _ in scheduler_kind_choices():
        adapter = adapter_for(ClusterFactory.build(scheduler_kind=value))
        assert adapter.kind == value
    assert isinstance(adapter_for(None), NoScheduler)


def test_a_kind_nobody_registered_is_refused_by_the_model():
    cluster = ClusterFactory.build(site=SiteFactory(), scheduler_kind="nomad")
    with pytest.raises(ValidationError, match=r"Unknown scheduler kind 'nomad'.*slurm"):
        cluster.full_clean()


def test_a_cluster_left_with_an_uninstalled_kind_fails_every_scheduler_call_instead_of_claiming_idle():
    # E.g. a database the demo wrote ("simulated"), served by the product without the sandbox.
    node = NodeFactory(cluster=ClusterFactory(scheduler_kind="nomad"))
    adapter = adapter_for(node.cluster)
    assert isinstance(adapter, UnregisteredScheduler) and adapter.kind == "nomad"
    with pytest.raises(SchedulerError, match="no installed app provides"):
        adapter.is_running_work(node)
    with pytest.raises(SchedulerError):
        adapter.drain_state(node)
    assert node.cluster.get_scheduler_kind_display() == "nomad (not installed)"


def test_the_admin_offers_the_registered_kinds_and_refuses_another(client, fleet_admin):
    site = SiteFactory()
    client.force_login(fleet_admin)
    add = reverse("admin:fleet_cluster_add")
    form = client.get(add)
    assert b'<option value="slurm"' in form.content and b'<option value="simulated"' in form.content
    bad = client.post(add, {"site": site.pk, "name": "c1", "scheduler_kind": "nomad", "scheduler_endpoint": ""})
    assert bad.status_code == 200 and b"Select a valid choice" in bad.content  # the form again, with the error
    assert not Cluster.objects.exists()
    good = client.post(add, {"site": site.pk, "name": "c1", "scheduler_kind": "slurm", "scheduler_endpoint": "h"})
    assert good.status_code == 302
    assert Cluster.objects.get().get_scheduler_kind_display() == "Slurm"
