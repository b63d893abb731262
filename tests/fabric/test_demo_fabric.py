"""The demo's simulated fabric (ibsim + opensm) for the bring-up bay: its plan is in force, the
two live faults are found on their ports, and the worker's scheduled sweep (the real diags,
pointed at ibsim by NODEWARDEN_FABRIC_TOOL_ENV) records a run of its own."""

from __future__ import annotations

import pytest
from nodes.management.commands.demo_fabric import record_look, start_demo_fabric

from fabric.choices import DiscrepancyKind as K
from fabric.models import CablingPlan, Ticket
from fabric.tasks import collect_fabric

from .conftest import require_ibsim

pytestmark = pytest.mark.django_db


def test_the_demo_fabric_shows_its_planted_faults_and_the_scheduled_sweep_works(settings):
    require_ibsim()
    sim = start_demo_fabric()
    try:
        assert CablingPlan.objects.get().links == 24 * 8 + 8 * 32
        run = record_look(sim)
        tickets = {t.kind: t for t in Ticket.objects.all()}
        assert sorted(tickets) == [K.LINK_DOWN, K.SWAPPED], run.summary
        assert "iad1-bay-13 mlx5_4/1" in tickets[K.LINK_DOWN].endpoints
        assert {"iad1-bay-17 mlx5_0/1", "iad1-bay-17 mlx5_1/1"} <= set(tickets[K.SWAPPED].endpoints)
        settings.NODEWARDEN_FABRIC_COLLECT = True
        settings.NODEWARDEN_FABRIC_TOOL_ENV = {
            k: v for k, v in sim.env().items() if k in ("IBSIM_SOCKNAME", "LD_PRELOAD")
        }
        assert collect_fabric().endswith("2 discrepancies")
        assert Ticket.objects.get(kind=K.LINK_DOWN).times_seen == 2
    finally:
        sim.stop()
