"""manage.py audit_fleet: compare what Nodewarden believes with the world, now.

    manage.py audit_fleet             # prints each breach; exit status 1 when there is one
    manage.py audit_fleet --json      # the run as JSON (counts per invariant, breaches with evidence)
    manage.py audit_fleet --dry-run   # record the run, raise and clear no finding

The same run as the beat task (``audit.services.run_audit``), recorded as an AuditRun.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.choices import Invariant
from audit.services import run_audit


class Command(BaseCommand):
    help = "Audit the fleet: every invariant between Nodewarden's records and the world; non-zero exit on breaches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the run as JSON.")
        parser.add_argument("--dry-run", action="store_true", help="Record the run only: no finding raised or cleared.")

    def handle(self, *args: Any, **opts: Any) -> None:
        run = run_audit(source="command", findings=not opts["dry_run"])
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "run": run.pk,
                        "started": run.started.isoformat(),
                        "breach_total": run.breach_total,
                        "counts": run.counts,
                        "breaches": run.breaches,
                        "raised": run.raised,
                        "cleared": run.cleared,
                        "error": run.error,
                    },
                    indent=1,
                )
            )
        else:
            self._print(run)
        if run.breach_total or run.error:
            sys.exit(1)

    def _print(self, run: Any) -> None:
        labels = dict(Invariant.choices)
        self.stdout.write(
            f"Audit run {run.pk} at {run.started:%Y-%m-%d %H:%M:%S} UTC: "
            f"{run.breach_total} breach{'es' if run.breach_total != 1 else ''}"
        )
        for name, c in run.counts.items():
            self.stdout.write(
                f"  {labels.get(name, name):<55} checked {c['checked']:>6}  breaches {c['breaches']:>4}"
                f"  unknown {c['unknown']:>4}  excused {c['excused']:>4}  not reached {c['not_reached']:>5}"
            )
        for b in run.breaches:
            self.stdout.write(
                f"BREACH {b['invariant']} {b['hostname']}: Nodewarden believes {b['believed']}; "
                f"the world says {b['world']}  {json.dumps(b['evidence'], default=str)}"
            )
        if run.breach_total > len(run.breaches):
            self.stdout.write(f"... and {run.breach_total - len(run.breaches)} more (counted, not kept)")
        if run.error:
            self.stderr.write(f"Checks that failed: {run.error}")
