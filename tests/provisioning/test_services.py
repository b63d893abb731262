"""prepare_boot, join and revoke_join_token: the Day 0 road from Enrolled to Onboard."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.test import RequestFactory
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from nodes.choices import ActorKind, EventKind, NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from nodewarden.errors import ReasonRequired, TransitionForbidden
from provisioning import services
from provisioning.models import BootConfig, JoinToken
from provisioning.tokens import hash_token
from telemetry.auth import identify_agent
from telemetry.models import AgentToken
from tests.factories import NodeFactory

from .conftest import OPS, provision

pytestmark = pytest.mark.django_db
FACTS = {"kernel": "6.8.0-45-generic", "os": "Ubuntu 24.04.1 LTS", "macs": {"enp1s0": "3c:ec:ef:12:34:56"}}


def join(node, token, **kwargs):  # type: ignore[no-untyped-def]
    return services.join(token, hostname=kwargs.pop("hostname", node.hostname), agent_facts=kwargs.pop("facts", FACTS))


# --- prepare_boot ---------------------------------------------------------------------
def test_it_prepares_an_enrolled_node_and_moves_it_to_initializing(node):
    boot, token = provision(node, interface_mac="3c:ec:ef:12:34:56")

    node.refresh_from_db()
    assert node.state == NodeState.INITIALIZING
    assert (boot.node_id, boot.generation, boot.interface_mac) == (node.pk, 1, "3c:ec:ef:12:34:56")
    stored = JoinToken.objects.get(node=node)
    assert stored.key_hash == hash_token(token) and stored.prefix == token[:12]
    assert stored.clear_token() == token
    assert timedelta(hours=23, minutes=59) < stored.expires_at - timezone.now() <= timedelta(hours=24)
    (event,) = NodeEvent.objects.filter(node=node)
    assert (event.transition, event.source_state, event.target_state) == (
        "start_initialization",
        NodeState.ENROLLED,
        NodeState.INITIALIZING,
    )
    assert (event.actor_name, event.reason) == ("system:tests", "rack and stack done")
    assert event.details["join_token"] == token[:12] and event.details["boot_generation"] == 1
    assert token not in str(event.details) and stored.key_hash not in str(event.details)
    assert boot.instance_key not in str(event.details), "the seed URL's key stays out of the history"


def test_re_provisioning_an_initializing_node_revokes_the_old_token_and_issues_a_new_one(node):
    first_boot, first = provision(node)
    boot, second = provision(node, reason="PXE timed out, again")

    assert boot.pk == first_boot.pk and boot.instance_key == first_boot.instance_key and boot.generation == 2
    old, new = JoinToken.objects.get(key_hash=hash_token(first)), JoinToken.objects.get(key_hash=hash_token(second))
    assert old.revoked_at is not None and new.revoked_at is None and new.generation == 2
    event = NodeEvent.objects.filter(node=node).first()
    assert (event.kind, event.reason) == (EventKind.ACTION, "Re-provisioned: PXE timed out, again")
    assert event.details["join_tokens_revoked"] == 1
    node.refresh_from_db()
    assert node.state == NodeState.INITIALIZING


def test_the_join_token_lifetime_comes_from_the_setting(node, settings):
    settings.NODEWARDEN_JOIN_TOKEN_TTL = 3600
    provision(node)
    token = JoinToken.objects.get(node=node)
    assert token.expires_at - token.created == pytest.approx(timedelta(hours=1), abs=timedelta(seconds=5))


@pytest.mark.parametrize("state", [NodeState.ONBOARD, NodeState.PRODUCTION, NodeState.DECOMMISSIONED])
def test_it_refuses_a_node_past_day_0_and_writes_nothing(state):
    node = NodeFactory(state=state)
    with pytest.raises(TransitionNotAllowed, match="only enrolled or initializing"):
        provision(node)
    assert not BootConfig.objects.exists() and not JoinToken.objects.exists() and not NodeEvent.objects.exists()


def test_a_bad_boot_config_field_is_named_and_nothing_is_written(node):
    with pytest.raises(ValidationError) as caught:
        provision(node, interface_mac="3c:ec", ip_address="10.1.2.3", prefix_length=24)
    assert "interface_mac" in caught.value.message_dict
    node.refresh_from_db()
    assert node.state == NodeState.ENROLLED
    assert not BootConfig.objects.exists() and not JoinToken.objects.exists() and not NodeEvent.objects.exists()


def test_unknown_boot_config_fields_are_refused(node):
    with pytest.raises(ValidationError) as caught:
        provision(node, generation=7)
    assert caught.value.message_dict == {"generation": ["Not a boot config field."]}


def test_it_needs_a_reason_and_the_operate_permission(node, viewer, operator):
    with pytest.raises(ReasonRequired):
        services.prepare_boot(node.pk, actor=OPS, reason="  ")
    with pytest.raises(TransitionForbidden):
        services.prepare_boot(node.pk, actor=Actor(user=viewer), reason="try")
    _, _token = services.prepare_boot(node.pk, actor=Actor(user=operator), reason="racked")
    assert JoinToken.objects.get(node=node).created_by == operator


def test_only_a_kubernetes_node_gets_a_kubeadm_bootstrap_token(node, k8s_node, slurm_node):
    for each in (node, k8s_node, slurm_node):
        provision(each)
    assert JoinToken.objects.get(node=node).kubeadm_token_id == ""
    assert JoinToken.objects.get(node=slurm_node).kubeadm_token_id == ""
    k8s = JoinToken.objects.get(node=k8s_node)
    assert len(k8s.kubeadm_token_id) == 6 and k8s.kubeadm_secret_hash == hash_token(k8s.kubeadm_token())


# --- join -----------------------------------------------------------------------------
def test_a_join_consumes_the_token_issues_an_agent_token_and_marks_the_node_onboard(node):
    _, token = provision(node)

    result = join(node, token)

    assert (result.node_id, result.hostname) == (node.pk, node.hostname)
    assert result.agent_token.startswith("nwa_")
    assert identify_agent(f"Bearer {result.agent_token}", RequestFactory().get("/")).node_id == node.pk
    node.refresh_from_db()
    assert node.state == NodeState.ONBOARD
    assert JoinToken.objects.get(node=node).used_at is not None
    onboard = NodeEvent.objects.get(node=node, transition="mark_onboard")
    assert (onboard.actor_kind, onboard.actor_name) == (ActorKind.SYSTEM, "system:provisioning")
    assert onboard.details["facts"] == FACTS and onboard.details["join_token"] == token[:12]
    assert result.agent_token not in str(onboard.details)
    assert AgentToken.objects.filter(node=node).count() == 1


def test_the_hostname_matches_case_insensitively_and_without_a_trailing_dot(node):
    _, token = provision(node)
    assert join(node, token, hostname=node.hostname.upper() + ".").node_id == node.pk


def test_a_token_works_once(node):
    _, token = provision(node)
    join(node, token)
    with pytest.raises(services.JoinTokenUsed, match="already used") as caught:
        join(node, token)
    assert caught.value.status == 409
    assert AgentToken.objects.filter(node=node).count() == 1


def test_an_expired_token_is_refused_with_410(node):
    _, token = provision(node)
    with (
        time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)),
        pytest.raises(services.JoinTokenExpired, match="expired at") as caught,
    ):
        join(node, token)
    assert caught.value.status == 410
    assert JoinToken.objects.get(node=node).used_at is None


def test_a_token_replaced_by_re_provisioning_is_refused_as_revoked(node):
    _, old = provision(node)
    _, new = provision(node)
    with pytest.raises(services.JoinTokenRevoked, match="revoked") as caught:
        join(node, old)
    assert caught.value.status == 410
    assert join(node, new).node_id == node.pk


@pytest.mark.parametrize("token", ["nwj_" + "x" * 43, "nwa_not-a-join-token", ""])
def test_an_unknown_token_is_refused_with_401(node, token):
    provision(node)
    with pytest.raises(services.UnknownJoinToken) as caught:
        join(node, token)
    assert caught.value.status == 401


def test_a_token_for_another_node_is_refused_and_not_used_up(node, slurm_node):
    _, token = provision(node)
    with pytest.raises(services.WrongHostname, match=f"belongs to '{node.hostname}', not 'gpu-s01'") as caught:
        join(node, token, hostname=slurm_node.hostname)
    assert caught.value.status == 403
    assert JoinToken.objects.get(node=node).used_at is None
    assert join(node, token).node_id == node.pk


def test_a_node_no_longer_initializing_cannot_join_and_the_token_stays_unused(node):
    _, token = provision(node)
    from nodes import services as lifecycle

    lifecycle.fail_validation(node.pk, actor=OPS, reason="no POST")
    with pytest.raises(services.NodeNotJoinable, match="not 'Initializing'"):
        join(node, token)
    assert JoinToken.objects.get(node=node).used_at is None
    assert not AgentToken.objects.filter(node=node).exists()


def test_a_remediating_node_joins_only_with_the_token_of_its_running_reimage(node):
    """The reimage rung's join (tests/e2e/test_reimage.py runs it whole): any other token is refused."""
    from nodes import services as lifecycle
    from remediation.choices import Rung, Status, StepStatus, Urgency
    from remediation.models import Remediation, RemediationStep

    _, day0 = provision(node)
    with pytest.raises(TransitionNotAllowed, match="only a node under remediation is reimaged"):
        services.prepare_reimage(node.pk, actor=OPS, reason="reimage")
    lifecycle.fail_validation(node.pk, actor=OPS, reason="no POST")
    lifecycle.start_remediation(node.pk, actor=OPS, reason="power cycle")
    now = timezone.now()
    rem = Remediation.objects.create(node=node, status=Status.RUNNING, urgency=Urgency.NOW, rung=Rung.POWER_CYCLE)
    cycle = RemediationStep.objects.create(remediation=rem, rung=Rung.POWER_CYCLE, deadline=now + timedelta(hours=1))
    with pytest.raises(services.NodeNotJoinable, match="no reimage waiting for it to rejoin"):
        join(node, day0)
    RemediationStep.objects.filter(pk=cycle.pk).update(status=StepStatus.FAILED)
    Remediation.objects.filter(pk=rem.pk).update(rung=Rung.REIMAGE)
    step = RemediationStep.objects.create(remediation=rem, rung=Rung.REIMAGE, deadline=now + timedelta(hours=1))
    with pytest.raises(services.NodeNotJoinable, match="not issued for the running reimage"):
        join(node, day0)  # a live token from before the reimage began
    assert JoinToken.objects.get(generation=1).used_at is None and not AgentToken.objects.filter(node=node).exists()

    boot, token = services.prepare_reimage(node.pk, actor=OPS, reason="reimage", expires_at=step.deadline)
    assert boot.generation == 2 and token.expires_at == step.deadline
    assert JoinToken.objects.get(generation=1).revoked_at is not None
    result = join(node, token.clear_token())
    step.refresh_from_db()
    node.refresh_from_db()
    assert step.status == StepStatus.VERIFYING and node.state == NodeState.FIRMWARE_UPDATE  # rejoined: re-validating
    assert identify_agent(f"Bearer {result.agent_token}", RequestFactory().get("/")).node_id == node.pk


@pytest.mark.parametrize("facts", [["not", "a", "dict"], {"blob": "x" * 9000}])
def test_bad_facts_are_a_validation_error_and_nothing_is_used(node, facts):
    _, token = provision(node)
    with pytest.raises(ValidationError):
        join(node, token, facts=facts)
    assert JoinToken.objects.get(node=node).used_at is None


# --- revoke ---------------------------------------------------------------------------
def test_revoking_an_unused_token_records_why(node, operator):
    _, token = provision(node)
    stored = JoinToken.objects.get(node=node)

    assert services.revoke_join_token(stored.pk, actor=Actor(user=operator), reason="seed URL leaked") is True

    assert services.revoke_join_token(stored.pk, actor=Actor(user=operator), reason="again") is False
    event = NodeEvent.objects.filter(node=node, kind=EventKind.ACTION).get()
    assert (event.actor_name, event.reason, event.details) == (
        "operator",
        "seed URL leaked",
        {"join_token_revoked": token[:12]},
    )
    with pytest.raises(services.JoinTokenRevoked):
        join(node, token)


def test_a_used_token_cannot_be_revoked(node):
    _, token = provision(node)
    join(node, token)
    assert services.revoke_join_token(JoinToken.objects.get(node=node).pk, actor=OPS, reason="late") is False
