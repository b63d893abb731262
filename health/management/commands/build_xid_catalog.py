"""Regenerate health/data/xid_catalog.csv from the shared reference catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from health.xid import CATALOG_CSV, write_catalog


class Command(BaseCommand):
    help = "Distil a reference XID catalog CSV into health/data/xid_catalog.csv (our severity and action)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("source", type=Path, help="e.g. ../shared/reference/xid-catalog.csv")

    def handle(self, *args: Any, source: Path, **options: Any) -> None:
        if not source.exists():
            raise CommandError(f"{source} does not exist")
        count = write_catalog(source)
        self.stdout.write(f"Wrote {count} XIDs to {CATALOG_CSV}")
