"""manage.py simulate_fleet: a fleet under published failure rates, the real system answering.

A sandbox command: run it with DJANGO_SETTINGS_MODULE=sandbox.settings (the product's settings do
not install the simulator).

    manage.py simulate_fleet --nodes 2048 --days 54                 # Llama 3 scale, default policy
    manage.py simulate_fleet --policy default --compare-policy aggressive --days 14
    manage.py simulate_fleet --nodes 256 --days 7 --json out.json --keep-db /tmp/sim
    manage.py simulate_fleet --nodes 256 --days 7 --compare-gpu-rungs  # reset rung + fencing on/off

Each run gets a database of its own (a fresh SQLite file, migrated first), so a simulation
never touches the fleet this portal manages and two policies start from the same fleet; the
child process runs the simulation (``sandbox.simulator.engine``) and writes its report as JSON; this
command prints it, or both side by side. ``--keep-db DIR`` keeps the databases: browse one with
``NODEWARDEN_VAR_DIR=DIR/1-<policy> manage.py runserver``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandbox.simulator import policies
from sandbox.simulator.faults import PUBLISHED_RATES


class Command(BaseCommand):
    help = "Simulate a GPU fleet under published failure rates, with Nodewarden's rules, policies and remediation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=256, help="Servers (8 GPUs each). Default 256.")
        parser.add_argument("--days", type=float, default=7.0, help="Simulated days. Default 7.")
        parser.add_argument(
            "--profile",
            choices=["h100-sxm-8"],
            default="h100-sxm-8",
            help="Hardware profile (the one the virtual agents know: HGX H100 8-GPU).",
        )
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--policy",
            default="default",
            help=f"Policy setting: {', '.join(policies.PRESETS)}, or a .json file of policies.",
        )
        parser.add_argument(
            "--compare-policy",
            default="",
            help="A second policy setting, run on the same fleet and faults; both reports side by side.",
        )
        parser.add_argument(
            "--compare-gpu-rungs",
            action="store_true",
            help="Run the policy twice on the same faults: with the GPU reset rung and GPU fencing "
            "(NODEWARDEN_GPU_RESET, NODEWARDEN_GPU_FENCING on) and without them; print the comparison.",
        )
        parser.add_argument(
            "--gpu-rungs",
            choices=["", "on", "off"],
            default="",
            help="Set NODEWARDEN_GPU_RESET and NODEWARDEN_GPU_FENCING for the run (default: the settings as they are).",
        )
        parser.add_argument(
            "--rates",
            choices=sorted(PUBLISHED_RATES),
            default="llama3",
            help="Whose all-cause failure rate (per 1000 node-days): "
            + ", ".join(f"{k} {v:g}" for k, v in PUBLISHED_RATES.items())
            + "; the mix of causes is "
            "always the Llama 3 table's.",
        )
        parser.add_argument("--rate-scale", type=float, default=1.0, help="And x this on top.")
        parser.add_argument("--noise-scale", type=float, default=1.0, help="x the rate of signals with no defect.")
        parser.add_argument("--checkpoint-minutes", type=float, default=20.0)
        parser.add_argument("--restart-minutes", type=float, default=10.0)
        parser.add_argument(
            "--job-nodes",
            type=int,
            default=None,
            help="Nodes of the synchronous job (default: all but 3%% hot spares).",
        )
        parser.add_argument(
            "--report-hours",
            type=float,
            default=168.0,
            help="Full routine report cycle of each agent (news is sent at once).",
        )
        parser.add_argument("--tick-minutes", type=float, default=5.0)
        parser.add_argument(
            "--speedup",
            type=float,
            default=0.0,
            help="At most this many simulated seconds per wall second (0: as fast as it goes).",
        )
        parser.add_argument(
            "--audit-hours",
            type=float,
            default=1.0,
            help="Run the fleet auditor this often (simulated hours; 0: never) and at the end.",
        )
        parser.add_argument("--json", default="", help="Write the report(s) here as JSON.")
        parser.add_argument("--keep-db", default="", help="Keep each run's SQLite database in this folder.")
        parser.add_argument(
            "--child", default="", help="(internal) run one simulation here and write its report to this JSON file"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["child"]:
            self._child(opts)
            return
        if opts["nodes"] < 8 or opts["days"] <= 0:
            raise CommandError("--nodes must be at least 8 and --days above 0")
        if opts["compare_gpu_rungs"] and opts["compare_policy"]:
            raise CommandError("--compare-gpu-rungs compares one policy with itself: leave out --compare-policy")
        names = [opts["policy"]] + ([opts["compare_policy"]] if opts["compare_policy"] else [])
        arms = [opts["gpu_rungs"]] * len(names)
        if opts["compare_gpu_rungs"]:
            names, arms = names * 2, ["on", "off"]
        for name in names:
            try:
                policies.load(name)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        workdir = Path(opts["keep_db"] or tempfile.mkdtemp(prefix="nodewarden-sim-"))
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            reports = [
                self._run_child(name, {**opts, "gpu_rungs": arm}, workdir, i)
                for i, (name, arm) in enumerate(zip(names, arms, strict=True))
            ]
        finally:
            if not opts["keep_db"]:
                shutil.rmtree(workdir, ignore_errors=True)
        from sandbox.simulator.report import render, render_gpu_rungs, render_side_by_side

        for report in reports:
            self.stdout.write(render(report) + "\n\n")
        if opts["compare_gpu_rungs"]:
            self.stdout.write(render_gpu_rungs(*reports) + "\n")
        elif len(reports) == 2:
            self.stdout.write(render_side_by_side(*reports) + "\n")
        if opts["json"]:
            Path(opts["json"]).write_text(json.dumps(reports if len(reports) > 1 else reports[0], indent=1))
        if any(r["run"]["agent_errors"] or r["run"]["task_errors"] for r in reports):
            raise CommandError("The simulation saw errors from the system under test (listed above).")

    def _run_child(self, policy: str, opts: dict[str, Any], workdir: Path, index: int) -> dict[str, Any]:
        label = (Path(policy).stem if policy.endswith(".json") else policy) + (
            f"-gpu-rungs-{opts['gpu_rungs']}" if opts["gpu_rungs"] else ""
        )
        rundir = workdir / f"{index + 1}-{label}"
        shutil.rmtree(rundir, ignore_errors=True)
        rundir.mkdir(parents=True)
        database = rundir / "nodewarden.sqlite3"  # the settings' own SQLite default under NODEWARDEN_VAR_DIR
        out = rundir / "report.json"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
        env.update(CELERY_TASK_ALWAYS_EAGER="true", NODEWARDEN_VAR_DIR=str(rundir))
        argv = [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "simulate_fleet",
            "--child",
            str(out),
            "--policy",
            policy,
        ]
        opts = {**opts, "rate_scale": opts["rate_scale"] * PUBLISHED_RATES[opts["rates"]] / PUBLISHED_RATES["llama3"]}
        for name in (
            "nodes",
            "days",
            "seed",
            "rate_scale",
            "noise_scale",
            "checkpoint_minutes",
            "restart_minutes",
            "report_hours",
            "tick_minutes",
            "speedup",
            "audit_hours",
        ):
            argv += [f"--{name.replace('_', '-')}", str(opts[name])]
        if opts["job_nodes"] is not None:
            argv += ["--job-nodes", str(opts["job_nodes"])]
        if opts["gpu_rungs"]:
            argv += ["--gpu-rungs", opts["gpu_rungs"]]
        self.stderr.write(
            f"Simulating {opts['nodes']} nodes for {opts['days']:g} days with policy {policy!r} "
            f"(database {database})..."
        )
        done = subprocess.run(argv, env=env, check=False)
        if done.returncode != 0 or not out.exists():
            raise CommandError(f"The simulation with policy {policy!r} failed (exit {done.returncode}).")
        return json.loads(out.read_text())

    def _child(self, opts: dict[str, Any]) -> None:
        import logging

        from django.core.management import call_command

        from sandbox.simulator.engine import SimConfig, Simulation
        from sandbox.simulator.report import build

        for noisy in (
            "celery",
            "bmc",
            "nodes",
            "remediation",
            "validation",
            "health",
            "telemetry",
            "schedulers",
            "audit",
        ):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        from django.db import connection

        # A throwaway database in one process: one connection kept open, no fsync per commit.
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = None
        connection.settings_dict.setdefault("OPTIONS", {})["init_command"] = (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;"
        )
        call_command("migrate", verbosity=0)
        name, about, _ = policies.load(opts["policy"])
        config = SimConfig(
            nodes=opts["nodes"],
            days=opts["days"],
            seed=opts["seed"],
            policy=opts["policy"],
            rate_scale=opts["rate_scale"],
            noise_scale=opts["noise_scale"],
            checkpoint_minutes=opts["checkpoint_minutes"],
            restart_minutes=opts["restart_minutes"],
            job_nodes=opts["job_nodes"],
            report_hours=opts["report_hours"],
            tick_minutes=opts["tick_minutes"],
            speedup=opts["speedup"],
            audit_hours=opts["audit_hours"],
            gpu_rungs={"on": True, "off": False}.get(opts["gpu_rungs"]),
        )
        started = time.perf_counter()
        simulation = Simulation(config, progress=lambda line: print(f"  {name}: {line}", file=sys.stderr, flush=True))
        simulation.run()
        report = build(simulation, wall_seconds=time.perf_counter() - started, policy_about=about)
        report["config"]["policy"] = name
        report["config"]["gpu_rungs"] = opts["gpu_rungs"] or "as set"
        Path(opts["child"]).write_text(json.dumps(report))
