"""``manage.py demo_schedulers``: the demo fleet's workload schedulers, until stopped.

Slurm is real: one throw-away Slurm 22.05 cluster (``sandbox.emulators.slurm``: munged, slurmctld,
and a real slurmd for the first three production nodes of each demo Slurm cluster by host name;
the other nodes are ``State=CLOUD`` nodes without a slurmd, which drain and resume like real
ones but never run a job). Both demo Slurm clusters' ``scheduler_endpoint`` becomes its
slurm.conf, so every drain the remediation engine or the churn asks for is a real ``scontrol``.

Kubernetes is a stand-in: no kube-apiserver can run here, so kmock's KubernetesEmulator serves
a Node object per node of the demo Kubernetes cluster over HTTP on 127.0.0.1, and the cluster's
``scheduler_endpoint`` becomes its URL. It refuses requests without the demo's bearer token.

``--ready-file`` is written once everything points at them: shell ``export`` lines with the
environment the worker and beat need (``NODEWARDEN_KUBERNETES_TOKENS``), which bin/demo sources.
Runs until Ctrl-C or SIGTERM (as bin/demo stops it), then stops every daemon it started.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Run the demo's workload schedulers (a real Slurm cluster, a Kubernetes stand-in) and point the "
        "demo clusters at them (until stopped)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--slurmd-per-cluster",
            type=int,
            default=3,
            help="Demo Slurm nodes per cluster with a real slurmd that runs jobs (default 3).",
        )
        parser.add_argument(
            "--ready-file",
            type=Path,
            help="Written once the clusters point at the schedulers: export lines for the worker.",
        )

    def handle(self, *args: Any, slurmd_per_cluster: int, ready_file: Path | None, **options: Any) -> None:
        from sandbox.demo import demo_fleet_exists
        from sandbox.demo.schedulers import running_demo_schedulers

        if not demo_fleet_exists():
            raise CommandError("No demo fleet: run manage.py seed_demo first.")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        with running_demo_schedulers(slurmd_per_cluster=slurmd_per_cluster) as demo:
            self.stdout.write(demo.describe())
            if demo.kube is None:
                self.stderr.write(
                    "kmock is not installed: no Kubernetes stand-in; the demo's Kubernetes "
                    "cluster's drains will fail (pip install kmock)."
                )
            if ready_file is not None:
                # Written whole, then renamed: bin/demo sources it as soon as it is not empty.
                partial = ready_file.with_name(ready_file.name + ".partial")
                partial.write_text(demo.env_exports())
                os.replace(partial, ready_file)
            self.stdout.flush()
            while not stop.wait(1.0):
                problem = demo.problem()
                if problem:
                    raise CommandError("A demo scheduler stopped: " + problem)
        self.stdout.write("Demo schedulers stopped.")
