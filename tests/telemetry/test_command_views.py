"""The node page's "Agent commands" panel: operators send a command with a reason and read the
outcome (a diagnostics bundle part by part); viewers read; customers never see the panel."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from nodes.services import Actor
from telemetry import commands
from telemetry.choices import CommandStatus
from telemetry.models import AgentCommand
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(tenant):
    return NodeFactory(hostname="gpu-cmd-01", tenant=tenant)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_operator_sends_a_gpu_reset_with_a_reason_and_it_is_queued(node, operator):
    client = signed_in(operator)
    panel = client.get(reverse("node-commands", args=[node.pk]))
    assert panel.status_code == 200
    assert b'id="command-issue-form"' in panel.content

    answer = client.post(
        reverse("node-command-issue", args=[node.pk]), {"verb": "reset_gpu", "gpu": "2", "reason": "XID 94 on GPU 2"}
    )
    assert answer.status_code == 302
    command = AgentCommand.objects.get(node=node)
    assert (command.verb, command.args, command.status) == ("reset_gpu", {"gpu": 2}, CommandStatus.QUEUED)
    assert (command.issued_by, command.reason) == (operator, "XID 94 on GPU 2")
    assert b"reset_gpu gpu 2" in client.get(reverse("node-commands", args=[node.pk])).content


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"verb": "reset_gpu", "gpu": "99", "reason": "x"}, "gpu must be an integer"),
        ({"verb": "reset_gpu", "gpu": "-1", "reason": "x"}, "gpu must be an integer"),
        ({"verb": "rm -rf /", "reason": "x"}, "Must be one of"),
        ({"verb": "reboot", "reason": "  "}, "reason"),
    ],
)
def test_a_bad_form_queues_nothing_and_says_why(node, operator, form, message):
    client = signed_in(operator)
    answer = client.post(reverse("node-command-issue", args=[node.pk]), form, follow=True)
    assert answer.status_code == 200
    assert message.lower() in answer.content.decode().lower()
    assert not AgentCommand.objects.filter(node=node).exists()


def test_the_outcome_shows_each_diagnostics_part(node, operator):
    command = commands.issue_command(node.pk, "collect_diagnostics", actor=Actor.system("tests"), reason="ticket 12")
    commands.deliver_commands(node.pk)
    commands.record_command_result(
        command.pk,
        node.pk,
        result=commands.CommandResult(
            status="succeeded",
            summary="3 parts",
            result={"kernel_log": "NVRM: Xid (PCI:0000:17:00): 94, <script>x</script>", "nvidia_smi": "GPU 0 ..."},
        ),
    )
    page = signed_in(operator).get(reverse("node-commands", args=[node.pk])).content.decode()
    assert "NVRM: Xid (PCI:0000:17:00): 94" in page
    assert "<script>x</script>" not in page  # the agent's text is escaped
    assert "3 parts" in page


def test_viewers_read_but_cannot_send_and_customers_see_nothing(node, viewer, customer):
    client = signed_in(viewer)
    panel = client.get(reverse("node-commands", args=[node.pk]))
    assert panel.status_code == 200 and b"command-issue-form" not in panel.content
    assert (
        client.post(reverse("node-command-issue", args=[node.pk]), {"verb": "reboot", "reason": "x"}).status_code == 403
    )

    client = signed_in(customer)
    assert client.get(reverse("node-commands", args=[node.pk])).status_code == 404
    assert (
        client.post(reverse("node-command-issue", args=[node.pk]), {"verb": "reboot", "reason": "x"}).status_code == 404
    )
    assert b'id="node-commands"' not in client.get(reverse("node-detail", args=[node.pk])).content
    assert not AgentCommand.objects.exists()
