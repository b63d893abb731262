"""The agent command channel, portal side: issue, deliver, result, expiry (telemetry.commands),
the operators' /api/nodes/{id}/commands/ and the agent's /api/agent/commands/ endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from nodes.choices import EventKind
from nodes.models import NodeEvent
from nodes.services import Actor
from nodewarden.errors import ReasonRequired
from telemetry import commands
from telemetry.choices import CommandStatus
from telemetry.models import AgentCommand
from telemetry.services import issue_agent_token
from telemetry.tasks import expire_agent_commands
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db
POLL = "/api/agent/commands/"


def agent_client(node) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + issue_agent_token(node.pk, actor=Actor.system("tests")))
    return client


def user_client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def issue(node, verb="reset_gpu", args=None, **kwargs) -> AgentCommand:
    args = {"gpu": 3} if args is None and verb == "reset_gpu" else args
    return commands.issue_command(node.pk, verb, args=args, actor=Actor.system("tests"), reason="XID 94", **kwargs)


def events(node) -> list[str]:
    return list(
        NodeEvent.objects.filter(node=node, kind=EventKind.ACTION).order_by("id").values_list("reason", flat=True)
    )


@pytest.mark.parametrize(
    ("verb", "args", "cleaned"),
    [
        ("reset_gpu", {"gpu": 0}, {"gpu": 0}),
        ("reset_gpu", {"gpu": 63}, {"gpu": 63}),
        ("reboot", None, {}),
        ("reboot", {}, {}),
        ("collect_diagnostics", None, {"collect": ["kernel_log", "nvidia_smi", "infiniband"]}),
        (
            "collect_diagnostics",
            {"collect": ["infiniband", "kernel_log", "infiniband"]},
            {"collect": ["kernel_log", "infiniband"]},
        ),
    ],
)
def test_each_verb_takes_its_typed_arguments(node, verb, args, cleaned):
    assert commands.clean_args(verb, args) == cleaned


@pytest.mark.parametrize(
    ("verb", "args"),
    [
        ("run_shell", {"cmd": "rm -rf /"}),
        ("reset_gpu", {}),
        ("reset_gpu", {"gpu": -1}),
        ("reset_gpu", {"gpu": 64}),
        ("reset_gpu", {"gpu": "3"}),
        ("reset_gpu", {"gpu": True}),
        ("reset_gpu", {"gpu": 3, "argv": "nvidia-smi -r"}),
        ("reboot", {"delay": 5}),
        ("collect_diagnostics", {"collect": []}),
        ("collect_diagnostics", {"collect": ["/etc/shadow"]}),
        ("collect_diagnostics", {"collect": "kernel_log"}),
        ("reboot", ["now"]),
    ],
)
def test_it_refuses_unknown_verbs_and_bad_arguments(node, verb, args):
    with pytest.raises(ValidationError):
        commands.issue_command(node.pk, verb, args=args, actor=Actor.system("tests"), reason="why")
    assert not AgentCommand.objects.exists()


def test_issuing_needs_a_reason_and_a_sane_ttl(node):
    with pytest.raises(ReasonRequired):
        commands.issue_command(node.pk, "reboot", actor=Actor.system("tests"), reason="  ")
    with pytest.raises(ValidationError):
        issue(node, "reboot", ttl=timedelta(days=2))
    assert not AgentCommand.objects.exists()


def test_issuing_queues_the_command_and_records_who_and_why(node, operator):
    command = commands.issue_command(
        node.pk, "reset_gpu", args={"gpu": 3}, actor=Actor(user=operator), reason="XID 94 on GPU 3"
    )
    assert (command.status, command.issued_by, command.issued_by_name) == (CommandStatus.QUEUED, operator, "operator")
    assert command.expires_at - command.created == commands.DEFAULT_TTL
    event = NodeEvent.objects.get(node=node, details__agent_command=command.pk)
    assert (event.actor, event.actor_name) == (operator, "operator")
    assert event.reason == f"Agent command reset_gpu (gpu 3) #{command.pk} issued: XID 94 on GPU 3"


def test_the_poll_delivers_queued_commands_once_and_only_to_their_node(node):
    other = NodeFactory()
    mine, theirs = issue(node), issue(other, "reboot")
    agent = agent_client(node)

    first = agent.get(POLL)
    second = agent.get(POLL)

    assert first.status_code == 200
    assert first.json()["commands"] == [
        {
            "id": mine.pk,
            "verb": "reset_gpu",
            "args": {"gpu": 3},
            "expires_at": first.json()["commands"][0]["expires_at"],
        }
    ]
    assert second.json() == {"commands": []}, "delivered at most once"
    mine.refresh_from_db()
    assert (mine.status, mine.delivered_at is not None) == (CommandStatus.DELIVERED, True)
    theirs.refresh_from_db()
    assert theirs.status == CommandStatus.QUEUED


def test_an_expired_command_is_never_delivered_and_says_so_in_history(node):
    command = issue(node, "reboot", ttl=timedelta(minutes=1))
    AgentCommand.objects.filter(pk=command.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    answer = agent_client(node).get(POLL)

    assert answer.json() == {"commands": []}
    command.refresh_from_db()
    assert (command.status, command.delivered_at) == (CommandStatus.EXPIRED, None)
    assert events(node)[-1].startswith(f"Agent command reboot #{command.pk} expired")


def test_the_beat_task_expires_stale_queued_commands_and_leaves_the_rest(node):
    stale, fresh = issue(node, "reboot"), issue(node)
    delivered = issue(node, "collect_diagnostics")
    AgentCommand.objects.filter(pk=delivered.pk).update(status=CommandStatus.DELIVERED)
    past = timezone.now() - timedelta(seconds=1)
    AgentCommand.objects.filter(pk__in=[stale.pk, delivered.pk]).update(expires_at=past)

    assert expire_agent_commands() == 1
    assert expire_agent_commands() == 0
    statuses = dict(AgentCommand.objects.values_list("pk", "status"))
    assert statuses == {stale.pk: "expired", fresh.pk: "queued", delivered.pk: "delivered"}


def test_a_delivered_command_never_answered_fails_its_ttl_after_delivery_and_a_late_answer_changes_nothing(node):
    command = issue(node, ttl=timedelta(minutes=5))
    (taken,) = commands.deliver_commands(node.pk)
    assert taken.answer_by == taken.delivered_at + timedelta(minutes=5)

    assert commands.expire_commands(taken.answer_by - timedelta(seconds=1)) == 0
    assert commands.expire_commands(taken.answer_by) == 1
    assert commands.expire_commands(taken.answer_by) == 0

    command.refresh_from_db()
    assert command.status == CommandStatus.FAILED and command.summary.startswith("Unanswered: the agent took it")
    assert events(node)[-1].startswith(f"Agent command reset_gpu (gpu 3) #{command.pk} failed: Unanswered")
    late = agent_client(node).post(f"/api/agent/commands/{command.pk}/result/", {"status": "succeeded"}, format="json")
    assert late.json()["changed"] is False


def test_whoever_registered_hears_of_each_commands_end_after_commit(node, django_capture_on_commit_callbacks):
    heard: list[int] = []
    commands.on_result(heard.append)
    try:
        answered, expired, unanswered = issue(node), issue(node, "reboot"), issue(node, "collect_diagnostics")
        AgentCommand.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        with django_capture_on_commit_callbacks(execute=True):
            commands.deliver_commands(node.pk)  # expires the reboot, takes the other two
        assert heard == [expired.pk]
        with django_capture_on_commit_callbacks(execute=True):
            commands.record_command_result(
                answered.pk, node.pk, result=commands.CommandResult(status="succeeded", summary="GPU 3 reset")
            )
            assert heard == [expired.pk]  # not before the commit
        AgentCommand.objects.filter(pk=unanswered.pk).update(answer_by=timezone.now() - timedelta(seconds=1))
        with django_capture_on_commit_callbacks(execute=True):
            commands.expire_commands()
    finally:
        commands.ON_RESULT.remove(heard.append)
    assert heard == [expired.pk, answered.pk, unanswered.pk]
    with django_capture_on_commit_callbacks(execute=True):
        commands.record_command_result(answered.pk, node.pk, result=commands.CommandResult(status="failed"))
    assert heard == [expired.pk, answered.pk, unanswered.pk]  # a resent result is no second end


def test_a_result_finishes_the_command_once_and_a_resent_result_changes_nothing(node):
    command = issue(node)
    agent = agent_client(node)
    agent.get(POLL)
    url = f"/api/agent/commands/{command.pk}/result/"

    first = agent.post(url, {"status": "succeeded", "summary": "GPU 3 reset", "result": {"gpu": 3}}, format="json")
    again = agent.post(url, {"status": "failed", "summary": "late duplicate"}, format="json")

    assert (first.status_code, first.json()) == (200, {"id": command.pk, "status": "succeeded", "changed": True})
    assert (again.status_code, again.json()) == (200, {"id": command.pk, "status": "succeeded", "changed": False})
    command.refresh_from_db()
    assert (command.status, command.summary, command.result) == ("succeeded", "GPU 3 reset", {"gpu": 3})
    assert command.finished_at is not None
    outcome = NodeEvent.objects.filter(node=node, details__command_status="succeeded")
    assert [(e.actor_name, e.reason) for e in outcome] == [
        (f"system:agent:{node.hostname}", f"Agent command reset_gpu (gpu 3) #{command.pk} succeeded: GPU 3 reset")
    ]


def test_another_nodes_command_is_404_and_unchanged(node):
    other = NodeFactory()
    theirs = issue(other)
    agent_client(other).get(POLL)

    answer = agent_client(node).post(f"/api/agent/commands/{theirs.pk}/result/", {"status": "failed"}, format="json")

    assert answer.status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == CommandStatus.DELIVERED


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "expired"}, "status"),
        ({"status": "succeeded", "result": ["not", "an", "object"]}, "result"),
        ({"status": "succeeded", "result": {"x": "y" * (commands.COMMAND_RESULT_MAX_BYTES + 1)}}, "result"),
        ({"status": "succeeded", "result": {"x": "nul\x00"}}, "result"),
    ],
)
def test_a_bad_result_is_a_400_naming_the_field(node, body, field):
    command = issue(node)
    agent = agent_client(node)
    agent.get(POLL)

    answer = agent.post(f"/api/agent/commands/{command.pk}/result/", body, format="json")

    assert answer.status_code == 400
    assert field in answer.json()["fields"]
    command.refresh_from_db()
    assert command.status == CommandStatus.DELIVERED


def test_a_result_for_a_command_never_delivered_is_a_409(node):
    command = issue(node)
    answer = agent_client(node).post(
        f"/api/agent/commands/{command.pk}/result/", {"status": "succeeded"}, format="json"
    )
    assert answer.status_code == 409


def test_portal_users_cannot_use_the_agent_endpoints(node, operator):
    issue(node)
    assert user_client(operator).get(POLL).status_code in (401, 403)
    assert APIClient().get(POLL).status_code == 401


def test_an_operator_issues_a_command_with_a_reason_and_lists_them(node, operator):
    client = user_client(operator)
    url = f"/api/nodes/{node.pk}/commands/"

    made = client.post(
        url, {"verb": "collect_diagnostics", "args": {"collect": ["nvidia_smi"]}, "reason": "ticket 42"}, format="json"
    )
    listed = client.get(url)

    assert made.status_code == 201, made.json()
    assert (made.json()["verb"], made.json()["args"], made.json()["status"]) == (
        "collect_diagnostics",
        {"collect": ["nvidia_smi"]},
        "queued",
    )
    assert made.json()["issued_by_name"] == "operator"
    assert [c["id"] for c in listed.json()["results"]] == [made.json()["id"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"verb": "reset_gpu", "args": {"gpu": 99}, "reason": "x"}, "args"),
        ({"verb": "reset_gpu", "args": {"gpu": 1}}, "reason"),
        ({"verb": "reset_gpu", "args": {"gpu": 1}, "reason": ""}, "reason"),
        ({"verb": "sh", "args": {}, "reason": "x"}, "verb"),
        ({"verb": "reboot", "reason": "x", "ttl_s": 10}, "ttl_s"),
    ],
)
def test_a_bad_request_from_an_operator_is_a_400(node, operator, body, field):
    answer = user_client(operator).post(f"/api/nodes/{node.pk}/commands/", body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["fields"]
    assert not AgentCommand.objects.exists()


def test_viewers_may_read_but_not_issue_and_customers_see_no_other_node(node, viewer, customer):
    url = f"/api/nodes/{node.pk}/commands/"
    body = {"verb": "reboot", "reason": "x"}
    assert user_client(viewer).get(url).status_code == 200
    assert user_client(viewer).post(url, body, format="json").status_code == 403
    assert user_client(customer).post(url, body, format="json").status_code == 404
    assert not AgentCommand.objects.exists()
