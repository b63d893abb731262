"""``manage.py seed_demo``: a plausible GPU fleet with months of history, for demos and screenshots."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count

from nodes.choices import NodeState
from sandbox import demo
from trends.tasks import evaluate_trends


class Command(BaseCommand):
    help = (
        "Create the demo fleet (2 sites, 4 clusters, 3 tenants, GPU nodes with months of lifecycle "
        "history and state-count snapshots) and the demo logins (admin, operator, viewer and one customer per "
        "tenant; an existing user of that name gets the demo password). Does nothing if the fleet exists, "
        "unless --reset."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=500, help="Number of nodes (default 500).")
        parser.add_argument("--days", type=int, default=120, help="Days of history (default 120).")
        parser.add_argument("--seed", type=int, default=42, help="Random seed; the same seed gives the same fleet.")
        parser.add_argument("--reset", action="store_true", help="Delete the demo fleet first and seed it again.")
        parser.add_argument("--logins", action="store_true", help="Only print the demo logins.")

    def handle(self, *args: Any, nodes: int, days: int, seed: int, reset: bool, logins: bool, **options: Any) -> None:
        if logins:
            self._print_logins()
            return
        if not demo.MIN_NODES <= nodes <= demo.MAX_NODES:
            raise CommandError(f"--nodes must be between {demo.MIN_NODES} and {demo.MAX_NODES}.")
        if days < demo.MIN_DAYS:
            raise CommandError(f"--days must be at least {demo.MIN_DAYS}.")
        if demo.demo_fleet_exists():
            if not reset:
                count = demo.demo_nodes().count()
                self.stdout.write(
                    f"The demo fleet already exists ({count} nodes); nothing to do. Use --reset to seed it again."
                )
                return
            self.stdout.write("Deleting the demo fleet and its history...")
            demo.reset_demo_fleet()

        self.stdout.write(f"Seeding the demo fleet: {nodes} nodes, {days} days of history (seed {seed})...")
        started = time.monotonic()
        counts = demo.build_demo_fleet(nodes=nodes, days=days, seed=seed)
        elapsed = time.monotonic() - started
        self.stdout.write(
            self.style.SUCCESS(
                "Seeded {sites} sites, {clusters} clusters, {racks} racks, {tenants} tenants, {nodes} nodes "
                "({gpus} GPUs), {events} history rows and {snapshots} state-count snapshots".format(**counts)
                + f" in {elapsed:.1f} s."
            )
        )
        # The beat's daily evaluation (trends.tasks.evaluate_trends), once now: the seeded months of
        # history are judged at once, so the Trends page is not empty until the next 03:30 UTC.
        trends = evaluate_trends()
        self.stdout.write(
            f"Evaluated trends over {trends['nodes']} nodes: {trends['opened']} flags opened (trend run {trends['run']})."
        )
        self._print_states()
        self._print_logins()

    def _print_states(self) -> None:
        counts = dict(demo.demo_nodes().values_list("state").annotate(n=Count("id")).order_by())
        line = ", ".join(f"{NodeState(s).label.lower()} {counts[s]}" for s in NodeState.values if counts.get(s))
        self.stdout.write(f"Nodes by state: {line}.")

    def _print_logins(self) -> None:
        self.stdout.write(f"Demo logins (password for all: {demo.DEMO_PASSWORD}):")
        for line in demo.login_lines():
            self.stdout.write(line)
