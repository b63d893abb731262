"""The demo's Day 0 and Day 1 against its real Redfish emulator: bay servers are enrolled,
PXE-booted, join and are validated through the real services; planted defects end in
triage with their reason; seeded nodes are picked up where the seed left them."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodewarden.celery import app as celery_app
from sandbox.demo import bring_up_demo_nodes, demo_nodes
from sandbox.demo.bringup import BAY_DEFECTS, attach_demo_bmcs, bay_servers, configure_demo_day1, demo_bmc_systems
from sandbox.demo.telemetry import report_demo_telemetry
from sandbox.emulators.bmc import RedfishEmulator
from tests.bmc.conftest import fast_bmc_settings  # noqa: F401  (autouse: short BMC timeouts)
from validation.services import advance_open_stages

pytestmark = pytest.mark.django_db
S = NodeState


@pytest.fixture
def demo(settings, django_capture_on_commit_callbacks):
    settings.NODEWARDEN_DEMO_CHURN = True
    call_command("seed_demo", "--nodes", "40", "--days", "30", "--seed", "7", stdout=io.StringIO())
    celery_app.conf.task_always_eager = True
    with RedfishEmulator(demo_bmc_systems()) as emulator:
        attach_demo_bmcs(emulator.url, emulator.username, emulator.password)
        configure_demo_day1()
        yield lambda: django_capture_on_commit_callbacks(execute=True)
    celery_app.conf.task_always_eager = False


def rounds(settle, n: int) -> list[str]:
    out = []
    for i in range(n):
        with settle():
            out.append(bring_up_demo_nodes(seed=i))
            report_demo_telemetry()
            advance_open_stages()
    return out


def test_the_emulator_serves_every_demo_node_and_the_bay():
    from sandbox.demo.bringup import system_uuid

    servers = bay_servers()
    assert len(servers) == 24 and {s["defect"] for s in servers} == {"", *BAY_DEFECTS.values()}
    assert servers[0]["bios_version"] == "2.0.7" and servers[2]["bios_version"] == "1.9.7"  # bay 3: too old
    assert system_uuid("SN1") == system_uuid("SN1") != system_uuid("SN2")


def test_bay_servers_are_enrolled_booted_joined_and_validated_and_defects_go_to_triage(demo):
    summaries = rounds(demo, 12)
    bay = {n.hostname: n for n in demo_nodes().filter(hostname__startswith="iad1-bay-")}
    assert "iad1-bay-01" in bay, summaries
    first = bay["iad1-bay-01"]
    road = list(
        NodeEvent.objects.filter(node=first, kind="transition")
        .order_by("created", "id")
        .values_list("target_state", flat=True)
    )
    assert road[:4] == [S.INITIALIZING, S.ONBOARD, S.FIRMWARE_UPDATE, S.INVENTORY_CHECK], road
    assert first.state not in (S.ENROLLED, S.INITIALIZING, S.TRIAGE), first.state
    # Planted: bay 3's BIOS is a major release behind, which the update cannot fix.
    reason = (
        NodeEvent.objects.filter(node=bay["iad1-bay-03"], transition="fail_validation")
        .order_by("created", "id")
        .first()
        .reason
    )
    assert "Firmware behind baseline after updating bios: bios 1.10.7 (baseline 2.1.7)" in reason


def test_seeded_day0_nodes_are_provisioned_and_onboard_ones_start_day1(demo):
    seeded_onboard = list(demo_nodes().filter(state=S.ONBOARD).values_list("pk", flat=True))
    rounds(demo, 3)
    assert not demo_nodes().filter(pk__in=seeded_onboard, state=S.ONBOARD).exists()
    assert not demo_nodes().filter(state=S.INITIALIZING, boot_config__isnull=True).exists()


def test_the_demo_agents_answer_commands_so_the_panel_shows_outcomes(demo):
    from nodes.services import Actor
    from telemetry.commands import issue_command
    from telemetry.models import AgentCommand

    node = demo_nodes().filter(state=S.PRODUCTION).first()
    actor = Actor.system("tests")
    issue_command(node.pk, "collect_diagnostics", actor=actor, reason="ticket 7")
    issue_command(node.pk, "reset_gpu", args={"gpu": 1}, actor=actor, reason="XID 94 on GPU 1")
    rounds(demo, 1)
    answered = {c.verb: c for c in AgentCommand.objects.filter(node=node)}
    assert answered["collect_diagnostics"].status == "succeeded"
    assert set(answered["collect_diagnostics"].result) == {"kernel_log", "nvidia_smi", "infiniband"}
    assert answered["reset_gpu"].status in ("succeeded", "failed")
    assert answered["reset_gpu"].summary in ("GPU 1 reset", "busy: 1 process on GPU 1")
