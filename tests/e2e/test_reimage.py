"""The reimage rung end to end: a reinstalled node rejoins, or the ladder climbs.

Real here: the portal (live server), Celery follow-ups and remediation tasks (eager, inline),
the sushy-tools Redfish emulator as the node's BMC, the NoCloud seed as cloud-init fetches it,
and the real agent's join command (a separate process, as cloud-init runs it). What cannot
exist here stands in, as in test_day0_to_production: the PXE install itself (the test fetches
the node's seed and runs the user-data's join command, which is what the reinstalled OS does).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from health.services import raise_finding
from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from provisioning import services as provisioning
from provisioning.models import BootConfig, JoinToken
from provisioning.tokens import hash_token
from remediation import reconciler
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationPolicy
from sandbox.emulators.bmc import RedfishEmulator
from telemetry.models import AgentToken
from telemetry.services import issue_agent_token
from tests.bmc.conftest import BmcEndpointFactory
from tests.factories import ClusterFactory, HardwareProfileFactory, NodeFactory
from validation.choices import Reentry, Stage
from validation.models import Day1Spec, RevalidationPlan

from .conftest import Portal
from .test_day0_to_production import HOSTNAME, eager_followups, run_join_command  # noqa: F401 (autouse)

pytestmark = pytest.mark.django_db(transaction=True)
S = NodeState


@pytest.fixture
def bmc():
    with RedfishEmulator([{"name": HOSTNAME, "bios_version": "2.1.7"}]) as emulator:
        yield emulator


@pytest.fixture
def node(bmc, settings):
    """A production node that came through Day 0 (boot generation 1, its join token used, an agent
    token in use), with its BMC on the emulator; findings on it are reimaged first (a policy)."""
    settings.NODEWARDEN_BMC_TIMEOUT, settings.NODEWARDEN_BMC_RETRIES = 2, 2
    settings.NODEWARDEN_BMC_RETRY_BACKOFF_MS = 1
    profile = HardwareProfileFactory(name="reimage-h100", firmware_baseline={})
    Day1Spec.objects.create(hardware_profile=profile, soak_seconds=0)
    RevalidationPlan.objects.create(reentry=Reentry.REMEDIATING, stages=[Stage.RELIABILITY])
    cluster = ClusterFactory(name="reimage")
    node = NodeFactory(hostname=HOSTNAME, state=S.PRODUCTION, cluster=cluster, hardware_profile=profile)
    NodeFactory.create_batch(9, state=S.PRODUCTION, cluster=cluster)  # one node of ten: within the blast radius
    bmc.set_power(True)
    BmcEndpointFactory(
        node=node, address=bmc.url, username=bmc.username, password=bmc.password, system_id=bmc.systems[0]["uuid"]
    )
    boot = BootConfig.objects.create(node=node, generation=1)
    day0 = JoinToken.objects.create(
        node=node,
        generation=1,
        key_hash=hash_token("nwj_day0"),
        salt="00" * 16,
        prefix="nwj_day0",
        expires_at=boot.created + timedelta(hours=24),
        used_at=boot.created,
    )
    node.day0_token, node.old_agent_token = day0, issue_agent_token(node.pk, actor=Actor.system("tests"))
    RemediationPolicy.objects.create(
        name="XID 79: reimage", match_rule="xid", urgency=Urgency.NOW, first_rung=Rung.REIMAGE
    )
    return node


def xid79(node) -> Remediation:
    """The finding; its remediation is decided and the reimage rung run inline (eager)."""
    raise_finding(
        node.pk,
        rule="xid",
        severity="catastrophic",
        xid=79,
        subject="xid:79",
        gpu_index=3,
        summary="XID 79: GPU has fallen off the bus",
        recommended_action="reimage",
    )
    node.refresh_from_db()
    return Remediation.objects.get(node=node)


def resets(bmc) -> int:
    """ComputerSystem.Reset requests the emulator has served (its request log)."""
    log = (bmc.workdir / f"{bmc.name}.log").read_text(errors="replace")
    return sum("POST" in line and "ComputerSystem.Reset" in line for line in log.splitlines())


def test_a_reimaged_node_rejoins_with_a_new_token_and_returns_to_production(
    node, bmc, live_server, operator, tmp_path, settings
):
    settings.PORTAL_URL = settings.NODEWARDEN_PORTAL_URL = live_server.url
    portal = Portal(live_server.url, operator)
    seed = f"/cloud-init/{node.boot_config.instance_key}/"
    before = yaml.safe_load(portal.get(seed + "meta-data")[1])["instance-id"]
    resets_before = resets(bmc)

    rem = xid79(node)

    # The rung ran: a re-install was issued, PXE once set, the node power cycled; the step waits for it.
    assert node.state == S.REMEDIATING and rem.status == Status.RUNNING and rem.rung == Rung.REIMAGE, rem.decisions
    step = rem.steps.get()
    assert step.status == StepStatus.RUNNING and step.boot_generation == 2, step.detail
    assert "waiting for the node's agent to rejoin" in step.detail
    system = bmc.system(0)
    # (sushy-tools keeps the target but not the "Once" the driver sends: it always answers "Continuous".)
    assert system["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert system["PowerState"] == "On" and resets(bmc) >= resets_before + 2  # off, then on
    reimage_token = JoinToken.objects.get(node=node, generation=2)
    assert reimage_token.expires_at == step.deadline and reimage_token.used_at is None
    # A worker's redelivery, or the reconciler, never PXE-boots the reinstalling node twice.
    assert reconciler.reconcile(now=step.started + timedelta(minutes=10))["requeued"] == 0
    assert resets(bmc) >= resets_before + 2 and JoinToken.objects.filter(node=node).count() == 2

    # The installer boots with the same seed URL: a NEW instance-id (cloud-init runs again) and the new token.
    status, meta = portal.get(seed + "meta-data")
    after = yaml.safe_load(meta)["instance-id"]
    assert status == 200 and after != before and after.endswith("-2")
    status, user_data = portal.get(seed + "user-data")
    assert status == 200 and reimage_token.clear_token() in user_data

    # The reinstalled OS runs the agent's join (the real command): the step passes, re-validation, production.
    new_agent_token = run_join_command(user_data, tmp_path).read_text().strip()
    node.refresh_from_db()
    rem.refresh_from_db()
    step.refresh_from_db()
    assert step.status == StepStatus.PASSED and "rejoined with join token" in step.detail
    assert node.state == S.PRODUCTION and rem.status == Status.SUCCEEDED, rem.decisions
    road = list(
        NodeEvent.objects.filter(node=node, kind="transition")
        .order_by("created", "id")
        .values_list("transition", flat=True)
    )
    assert road == [
        "cordon",
        "start_remediation",
        "revalidate",
        "pass_firmware",
        "pass_inventory_check",
        "pass_burn_in",
        "pass_fabric_check",
        "release_to_production",
    ]
    assert NodeEvent.objects.filter(node=node, reason="The reimaged node booted and its agent rejoined.").exists()
    tokens = {t.key_hash: t for t in AgentToken.objects.filter(node=node)}
    assert tokens[hash_token(node.old_agent_token)].revoked_at is not None  # the old disk's token is dead
    assert tokens[hash_token(new_agent_token)].revoked_at is None
    # The join token worked once.
    with pytest.raises(provisioning.JoinTokenUsed):
        provisioning.join(reimage_token.clear_token(), hostname=HOSTNAME, agent_facts={})


def test_a_reimaged_node_that_never_rejoins_fails_the_step_at_its_deadline_and_goes_to_repair(node, bmc):
    from repairs.models import RepairTicket

    rem = xid79(node)
    step = rem.steps.get()
    assert step.status == StepStatus.RUNNING and node.state == S.REMEDIATING, step.detail
    reimage_token = JoinToken.objects.get(node=node, generation=2)

    assert reconciler.reconcile(now=step.deadline - timedelta(seconds=1))["timed_out"] == 0  # still waiting
    assert reconciler.reconcile(now=step.deadline + timedelta(seconds=1))["timed_out"] == 1
    step.refresh_from_db()
    rem.refresh_from_db()
    node.refresh_from_db()
    assert step.status == StepStatus.FAILED and "timed out" in step.detail
    assert rem.rung == Rung.REPAIR and rem.status == Status.HANDED_OFF and node.state == S.REPAIR
    assert "reimage (failed)" in RepairTicket.objects.get(node=node).what
    # A late join is refused with why, and writes nothing (the token stays unused).
    with pytest.raises(provisioning.NodeNotJoinable, match="not 'Initializing'"):
        provisioning.join(reimage_token.clear_token(), hostname=HOSTNAME, agent_facts={})
    reimage_token.refresh_from_db()
    assert reimage_token.used_at is None
