"""Print (or, with --apply, run) the DDL that partitions the telemetry history by month."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.models import Min
from django.utils import timezone

from telemetry.models import NodeReport
from telemetry.partitioning import apply_partitioning, partition_ddl, partitioned_tables


class Command(BaseCommand):
    help = (
        "Print the SQL that turns telemetry_nodereport, telemetry_gpusample, telemetry_xidrecord and "
        "telemetry_gpusampledaily (those not partitioned yet) into tables range-partitioned by month "
        "(PostgreSQL). --apply runs it in one transaction."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--apply", action="store_true", help="Execute the DDL (PostgreSQL only).")
        parser.add_argument(
            "--since",
            type=date.fromisoformat,
            default=None,
            help="First month to create (YYYY-MM-DD); default: the oldest report's month.",
        )

    def handle(self, *args: Any, apply: bool, since: date | None, **options: Any) -> None:
        if since is None:
            oldest = NodeReport.objects.aggregate(t=Min("collected_at"))["t"] or timezone.now()
            since = oldest.date()
        if not apply:
            self.stdout.write(
                "BEGIN;\n" + "\n".join(partition_ddl(since=since, skip=partitioned_tables())) + "\nCOMMIT;"
            )
            return
        if connection.vendor != "postgresql":
            raise CommandError("--apply needs PostgreSQL; without it the DDL is only printed.")
        try:
            statements = apply_partitioning(since=since)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"Partitioned the telemetry history ({len(statements)} statements)."))
