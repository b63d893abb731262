"""Issue a node agent token: ``manage.py issue_agent_token <hostname>`` prints it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from nodes.models import Node
from nodes.services import Actor
from telemetry.services import issue_agent_token


class Command(BaseCommand):
    help = "Issue an agent token for a node (printed once; only its hash is stored)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("hostname")
        parser.add_argument("--reason", default="Agent token issued from the command line")

    def handle(self, *args: Any, hostname: str, reason: str, **options: Any) -> None:
        node = Node.objects.filter(hostname=hostname).only("id").first()
        if node is None:
            raise CommandError(f"No node with hostname {hostname!r}.")
        self.stdout.write(issue_agent_token(node.pk, actor=Actor.system("cli"), reason=reason))
