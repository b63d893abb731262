"""``manage.py demo_reach``: where the demo's alerts and events go (sandbox.demo.reach), until stopped.

A real Alertmanager when its binary is installed (skipped, with a line saying so, when not) and
the feed receiver that the seeded webhook subscription points at. ``--ready-file`` is written
once both run: shell ``export`` lines for the portal and workers (NODEWARDEN_ALERTMANAGER_URL),
which bin/demo sources. Runs until Ctrl-C or SIGTERM, then stops Alertmanager by its PID.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Run the demo's Alertmanager (when installed) and feed receiver (until stopped)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--var-dir", type=Path, default=Path(os.environ.get("NODEWARDEN_VAR_DIR") or "var"), help="Data folder."
        )
        parser.add_argument("--receiver-port", type=int, default=0, help="The receiver's port (default: a free one).")
        parser.add_argument("--ready-file", type=Path, help="Written once they run: export lines for the workers.")

    def handle(self, *args: Any, var_dir: Path, receiver_port: int, ready_file: Path | None, **options: Any) -> None:
        from sandbox.demo.reach import running_demo_reach

        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        with running_demo_reach(var_dir, receiver_port=receiver_port) as reach:
            self.stdout.write(reach.describe())
            if ready_file is not None:
                # Written whole, then renamed: bin/demo sources it as soon as it is not empty.
                partial = ready_file.with_name(ready_file.name + ".partial")
                partial.write_text(reach.env_exports())
                os.replace(partial, ready_file)
            self.stdout.flush()
            while not stop.wait(1.0):
                problem = reach.problem()
                if problem:
                    raise CommandError(problem)
        self.stdout.write("Demo Alertmanager and feed receiver stopped.")
