"""An operator's maintenance against a real Slurm 22.05: the node drains after the customer's job,
stays drained through maintenance (the reason names maintenance and the operator's reason) and
through its re-validation plan, and is resumed only once the plan (nothing touched: the inventory
check) has passed. The fleet auditor counts a node in maintenance as out of production."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit import invariants as C
from audit.services import context
from nodes import services
from nodes.choices import MaintenanceWork, NodeState
from schedulers.reactions import follow_drains
from schedulers.slurm import SlurmAdapter
from tests.factories import NodeFactory
from tests.validation.conftest import eager, idle_report, send  # noqa: F401
from validation.services import advance_open_stages

pytestmark = pytest.mark.django_db
S = NodeState


def test_maintenance_keeps_the_node_drained_until_the_short_plan_passes(slurm, slurm_cluster, eager, operator):  # noqa: F811
    node = NodeFactory(hostname="gpu-s-01.dc1.example.net", cluster=slurm_cluster, state=S.PRODUCTION)
    adapter = SlurmAdapter(slurm_cluster)
    job = slurm.submit("gpu-s-01", 300, "customer-train")
    slurm.wait_job_running(job)
    with eager():
        services.start_maintenance(node.pk, actor=services.Actor(user=operator), reason="Swap PSU B (DC-311)")
    node.refresh_from_db()
    assert node.state == S.DRAIN_PENDING and slurm.job_state(job) == "R"  # the job finishes first
    assert adapter.show_node(node).drain_flag

    slurm.run("scancel", job)  # the customer's job ends
    slurm.wait_job_state(job, "")
    for _ in range(3):  # drain pending -> draining -> maintenance, as Slurm reports the node idle
        with eager():
            follow_drains()
        node.refresh_from_db()
        if node.state == S.MAINTENANCE:
            break
    assert node.state == S.MAINTENANCE
    info = adapter.show_node(node)
    assert info.drain_flag and info.ours, info.describe()
    assert info.reason.startswith("nodewarden: Maintenance:") and "Swap PSU B (DC-311)" in info.reason, info.describe()

    with eager():
        services.end_maintenance(
            node.pk, actor=services.Actor(user=operator), reason="PSU swapped", work=MaintenanceWork.NONE
        )
    node.refresh_from_db()
    assert node.state == S.INVENTORY_CHECK  # firmware not in the plan: skipped
    assert adapter.show_node(node).drain_flag  # still out while the plan runs

    send(node, idle_report(node))
    with eager():
        advance_open_stages()
    node.refresh_from_db()
    assert node.state == S.PRODUCTION
    info = adapter.show_node(node)
    assert not info.drain_flag and not info.reason, info.describe()


def test_a_node_in_maintenance_that_slurm_still_schedules_is_a_breach(slurm, slurm_cluster, settings):
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 0
    node = NodeFactory(hostname="gpu-s-02.dc1.example.net", cluster=slurm_cluster, state=S.MAINTENANCE)
    type(node).objects.filter(pk=node.pk).update(state_changed_at=timezone.now() - timedelta(days=1))
    agree, _ = C.scheduler_agreement(context())
    [breach] = agree.breaches
    assert (breach.hostname, breach.believed, breach.world) == (
        node.hostname,
        "maintenance: out of production",
        "not cordoned",
    )
