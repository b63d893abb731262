"""``manage.py demo_fabric``: the demo's InfiniBand fabric, simulated by ibsim with opensm.

A rail-optimized fat tree for the bring-up bay's 24 servers (8 HCAs each: 8 rail leaves,
4 spines) runs in ibsim with opensm as its subnet manager; its cabling plan is imported as
the plan in force; two faults are made live through ibsim's console (bay 13's mlx5_4 cable
pulled, bay 17's mlx5_0 and mlx5_1 cables swapped); one discovery run is recorded at once.
The worker then sweeps it with the real infiniband-diags every few minutes (the environment
for that is written to --ready-file as shell exports, which bin/demo sources) and whenever
a bay server's Day 1 fabric check asks. Runs until stopped (SIGTERM, Ctrl-C).
"""

from __future__ import annotations

import json
import shlex
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

PULLED = ("iad1-bay-13 mlx5_4",)
SWAPPED = (("iad1-bay-17 mlx5_0", 1), ("iad1-bay-17 mlx5_1", 1))


def start_demo_fabric() -> Any:
    """The simulated bay fabric, started, with its plan imported and the demo faults made."""
    from fabric.plan import import_plan
    from fabric.topology import generate_fat_tree
    from nodes.services import Actor
    from sandbox.demo.bringup import bay_servers
    from sandbox.emulators.fabric import SimulatedFabric, missing_components

    missing = missing_components()
    if missing:
        raise CommandError(f"No simulated fabric: {', '.join(missing)} missing (bin/test installs them).")
    names = [server["name"] for server in bay_servers()]
    fabric = generate_fat_tree(hosts=len(names), hcas_per_host=8, host_names=names)
    import_plan(
        fabric.plan_csv(),
        actor=Actor.system("demo-fabric"),
        source="demo bay fat tree",
        note="The bring-up bay's rail-optimized fat tree (demo)",
    )
    sim = SimulatedFabric(fabric, sweep_interval=2)
    sim.start()
    try:
        for hca in PULLED:
            sim.unlink(hca)
        sim.swap_cables(*SWAPPED)
    except BaseException:
        sim.stop()  # else ibsim and opensm outlive the failed start
        raise
    return sim


def record_look(sim: Any) -> Any:
    from fabric.discovery import seen_from_topology
    from fabric.services import record_run
    from nodes.services import Actor

    outputs = sim.collect()
    topology, counters = outputs.parse()
    seen, by_port, guids = seen_from_topology(topology, counters)
    return record_run(seen, by_port or {}, outputs=outputs.texts(), guids=guids, actor=Actor.system("demo-fabric"))


class Command(BaseCommand):
    help = "Run the demo's simulated InfiniBand fabric (ibsim + opensm) until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--ready-file", type=Path, help="Written (shell exports) once the fabric is up.")
        parser.add_argument("--sweep-minutes", type=float, default=6.0, help="How often the worker sweeps it.")

    def handle(self, *args: Any, ready_file: Path | None, sweep_minutes: float, **options: Any) -> None:
        from sandbox.demo import demo_fleet_exists

        if not demo_fleet_exists():
            raise CommandError("No demo fleet: run manage.py seed_demo first.")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        from sandbox.emulators.fabric import missing_components

        missing = missing_components()
        if missing:  # the demo goes on without a fabric; the pages say there is no plan
            self.stderr.write(f"No simulated fabric: {', '.join(missing)} missing (bin/demo installs them as root).")
            if ready_file is not None:
                ready_file.write_text("# no simulated fabric\n")
            while not stop.wait(1.0):
                pass
            return
        sim = start_demo_fabric()
        try:
            run = record_look(sim)
            self.stdout.write(
                f"Simulated fabric up: {len(sim.topology().devices)} devices; run {run.pk} found "
                f"{run.summary['discrepancies']} discrepancies, opened {run.summary['tickets_opened']} tickets."
            )
            if ready_file is not None:
                env = json.dumps({k: v for k, v in sim.env().items() if k in ("IBSIM_SOCKNAME", "LD_PRELOAD")})
                ready_file.write_text(
                    "".join(
                        f"export {k}={shlex.quote(v)}\n"
                        for k, v in {
                            "NODEWARDEN_FABRIC_COLLECT": "1",
                            "NODEWARDEN_FABRIC_COLLECT_HOURS": str(sweep_minutes / 60),
                            "NODEWARDEN_FABRIC_TOOL_ENV": env,
                        }.items()
                    )
                )
            while not stop.wait(1.0):
                pass
        finally:
            sim.stop()
        self.stdout.write("Simulated fabric stopped.")
