"""``manage.py demo_bmc``: the demo fleet's BMCs, one real Redfish emulator serving them all.

Writes a system for every demo node and for the bring-up bay, starts the sushy-tools
emulator (``sandbox.emulators.bmc.RedfishEmulator``: 127.0.0.1, a free port, basic auth with a fresh
password), points every demo node's BMC endpoint at it (password encrypted at rest), sets
the demo's Day 1 specs, then keeps the emulator running until it is stopped (Ctrl-C or
SIGTERM, as bin/demo does). ``--ready-file`` is written once the endpoints point at it.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Run the demo fleet's Redfish BMC emulator and attach the demo nodes to it (until stopped)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--power-delay",
            type=float,
            default=2.0,
            help="Seconds a power change takes to show (real BMCs: seconds to minutes).",
        )
        parser.add_argument("--ready-file", type=Path, help="Written once the demo nodes point at the emulator.")

    def handle(self, *args: Any, power_delay: float, ready_file: Path | None, **options: Any) -> None:
        from sandbox.demo import demo_fleet_exists
        from sandbox.demo.bringup import attach_demo_bmcs, configure_demo_day1, demo_bmc_systems
        from sandbox.emulators.bmc import RedfishEmulator

        if not demo_fleet_exists():
            raise CommandError("No demo fleet: run manage.py seed_demo first.")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        systems = demo_bmc_systems()
        with RedfishEmulator(systems, power_delay=power_delay) as emulator:
            created = attach_demo_bmcs(emulator.url, emulator.username, emulator.password)
            configure_demo_day1()
            self.stdout.write(
                f"Redfish emulator on {emulator.url}: {len(systems)} systems; "
                f"{created} BMC endpoint(s) created, every demo node points at it."
            )
            if ready_file is not None:
                ready_file.write_text(emulator.url + "\n")
            while not stop.wait(1.0):
                if emulator.process is None or emulator.process.poll() is not None:
                    raise CommandError("The Redfish emulator stopped:\n" + emulator.log_tail())
        self.stdout.write("Redfish emulator stopped.")
