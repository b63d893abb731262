"""A real, throw-away Slurm 22.05 cluster on this host, for tests and the demo.

Not a mock: munged, slurmctld and one ``slurmd -N <name>`` per node run as their own
processes on 127.0.0.1 and are reached by the same ``scontrol``/``sinfo``/``squeue``
that talk to a production cluster. It follows the recipe in
shared/reference/real-components.md section 4, with these changes:

* every port is a free one picked at start (never fixed), so parallel test workers and
  the demo each run their own cluster side by side;
* no GRES unless ``gpus=N`` is given: then ``GresTypes=gpu``, ``Gres=gpu:N`` on every node and a
  gres.conf naming one fake device file per GPU (``mknod`` in the cluster's directory: gres/gpu drops
  GPUs without a file, even with ``Flags=CountOnly``, and slurmctld then marks the node INVAL), as
  on a real GPU node. slurmctld refuses to change such a node's GPU count (``scontrol update
  Gres=gpu:3``: "Attempt to change gres/gpu Count ... invalid with File configuration"); ``SlurmdParameters=config_overrides`` so the node layout in
  slurm.conf is used whatever ``slurmd -C`` says on this machine;
* short scheduler and ping intervals: a job starts within ~1 s, a resumed node answers in ~1 s;
* optional ``cloud_nodes``: in slurm.conf with ``State=CLOUD`` and no slurmd (the recipe's
  "Extra nodes without a slurmd"): they show ``idle~``, and drain and resume both succeed
  (``drain~``, then ``idle~``), so a large fleet costs one slurmctld and a few slurmd.
  ``PrivateData=cloud`` keeps them visible; power saving never suspends or resumes anything
  (``SuspendTime=INFINITE``, programs ``/bin/true``), so never send a job to one.

Usage::

    with SlurmCluster(["gpu-s-01", "gpu-s-02"]) as slurm:
        job = slurm.submit("gpu-s-01", 5, "train")
        slurm.wait_job_running(job)
        subprocess.run(["sinfo"], env=slurm.env())

``python -m sandbox.emulators.slurm gpu-s-01 gpu-s-02`` runs one until Ctrl-C and prints
its ``SLURM_CONF``. Runs as root (munged needs ``-f``; slurmd must be root to start jobs
as their users). This module must not import Django.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

LOCALHOST = "127.0.0.1"
_CLUSTER_NUMBERS = itertools.count(1)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
FAST_SCHEDULING = "batch_sched_delay=0,sched_interval=1,bf_interval=1"
COMMAND_TIMEOUT = 15.0
START_TIMEOUT = 20.0

SLURM_CONF = """\
ClusterName={cluster_name}
SlurmctldHost={host}({addr})
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Jobs start within ~1 s (slurmctld's background loop ticks once a second): batch_sched_delay=0
# (default 3 s) for a submitted job, and sched_interval=1 (default 60 s) for the first job after
# start-up (~3 s otherwise) and for a job passed over while its node was drained (Slurm does not
# reschedule when a resumed node re-registers). bf_interval=1 (default 30 s) likewise.
SchedulerParameters={scheduler_parameters}
ReturnToService=2
# Seconds: a node that stops answering is noticed (and a resumed one re-pinged) quickly.
SlurmdTimeout={slurmd_timeout}
# Seconds between SIGTERM and SIGKILL when a job is cancelled or requeued.
KillWait=1
# Seconds a finished job stays visible to "scontrol show job" (default 300).
MinJobAge=10
SlurmdParameters=config_overrides
{cloud_settings}{gres_types}{extra_conf}NodeName=DEFAULT CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory=1000{gres}
NodeName=DEFAULT State=UNKNOWN
{node_lines}
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
# Only with cloud nodes: without PrivateData=cloud, sinfo and scontrol do not show them at all.
CLOUD_SETTINGS = """\
PrivateData=cloud
SuspendProgram=/bin/true
ResumeProgram=/bin/true
SuspendTime=INFINITE
ResumeTimeout=30
"""


def free_port() -> int:
    """A TCP port nobody listens on now (on every address: slurmd binds 0.0.0.0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def slurm_installed() -> bool:
    return all(shutil.which(tool) for tool in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol"))


class SlurmCluster:
    """munged + slurmctld + one slurmd per node in a temporary directory; a context manager."""

    def __init__(
        self,
        nodes: Sequence[str] = ("gpu-s-01", "gpu-s-02", "gpu-s-03"),
        *,
        cpus: int = 2,
        slurmd_timeout: int = 4,
        scheduler_parameters: str = "",
        dead_nodes: Sequence[str] = (),
        cloud_nodes: Sequence[str] = (),
        gpus: int = 0,
        extra_conf: str = "",
    ) -> None:
        self.nodes = list(nodes)
        # Lines added to slurm.conf as they are (a test's Prolog=, HealthCheckProgram=, ...).
        self.extra_conf = extra_conf
        # Nodes in slurm.conf without a slurmd: their port has no listener (they show ``unk*``/``down*``).
        self.dead_nodes = list(dead_nodes)
        # Nodes without a slurmd that drain and resume cleanly (State=CLOUD: ``idle~``).
        self.cloud_nodes = list(cloud_nodes)
        self.cpus = cpus
        # GPUs per node (gres/gpu), each backed by a fake device file: 0 means no GRES at all.
        self.gpus = gpus
        self.slurmd_timeout = slurmd_timeout
        self.scheduler_parameters = scheduler_parameters
        self.dir: Path | None = None
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started_in: float = 0.0

    # --- Life cycle ------------------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def conf_path(self) -> Path:
        if self.dir is None:
            raise RuntimeError("the Slurm cluster is not started")
        return self.dir / "slurm.conf"

    def env(self) -> dict[str, str]:
        """The environment for a Slurm command against this cluster (this process's, plus SLURM_CONF)."""
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    def start(self) -> None:
        if not slurm_installed():
            raise RuntimeError("Slurm or munge is not installed (apt-get install slurm-wlm munge)")
        began = time.monotonic()
        for attempt in range(3):
            try:
                self._start_once()
                break
            except RuntimeError as exc:
                # A free port picked here can be taken by another process before our daemon binds it.
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
        self.started_in = time.monotonic() - began

    def _start_once(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nodewarden-slurm-"))
        try:
            self._prepare()
            self._start_munged()
            self._start_slurmctld()
            for name in self.nodes:
                self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf_path)])
            self._wait(lambda: self._idle_count() == len(self.nodes), "every slurmd to register idle")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process this cluster started (by PID) and remove its directory."""
        if self.dir is None:
            return
        # slurmd and slurmctld first (SIGTERM: slurmctld saves state, ~0.1 s), their jobs, munged last.
        slurm = [name for name in self.processes if name != "munged"]
        for name in slurm:
            self._signal(name, signal.SIGTERM)
        self._kill_job_processes()
        for name in slurm:
            self._reap(name)
        self._signal("munged", signal.SIGTERM)
        self._reap("munged")
        self.processes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    # --- Jobs and nodes --------------------------------------------------------------------------
    def run(self, *args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster."""
        result = subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def submit(self, node: str, seconds: float, name: str = "job", *, requeue: bool = True) -> str:
        """Submit ``sleep seconds`` pinned to node; the job id."""
        flag = "--requeue" if requeue else "--no-requeue"
        out = self.run(
            "sbatch", "--parsable", flag, "-w", node, "-J", name, "-o", "/dev/null", "--wrap", f"sleep {seconds}"
        ).stdout
        return out.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """squeue's short state (R, PD, CG, ...), or "" once the job has left the queue."""
        return self.run("squeue", "-h", "-j", job_id, "-o", "%t", check=False).stdout.strip()

    def wait_job_state(self, job_id: str, *states: str, timeout: float = 15.0) -> str:
        self._wait(lambda: self.job_state(job_id) in states, f"job {job_id} to be {'/'.join(states)}", timeout)
        return self.job_state(job_id)

    def wait_job_running(self, job_id: str, timeout: float = 15.0) -> None:
        self.wait_job_state(job_id, "R", timeout=timeout)

    def node_state(self, name: str) -> str:
        """sinfo's long state: idle, mixed, allocated, draining, drained, idle*, ..."""
        return self.run("sinfo", "-h", "-N", "-n", name, "-o", "%T").stdout.strip()

    def wait_node_state(self, name: str, *states: str, timeout: float = 15.0) -> str:
        self._wait(lambda: self.node_state(name) in states, f"{name} to be {'/'.join(states)}", timeout)
        return self.node_state(name)

    def reset(self) -> None:
        """Every job of ours cancelled and every node idle again (between tests)."""
        user = pwd.getpwuid(os.getuid()).pw_name
        self.run("scancel", "--quiet", f"--user={user}", check=False)
        self._wait(lambda: not self.run("squeue", "-h", "-o", "%i").stdout.strip(), "the queue to empty")
        for name in self.nodes:
            if self.node_state(name) != "idle":
                self.run("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        # A resumed node shows idle* until slurmd answers the next ping (about a second).
        self._wait(lambda: self._idle_count() == len(self.nodes), "every node to be idle")

    # --- Internals -------------------------------------------------------------------------------
    def _prepare(self) -> None:
        assert self.dir is not None
        for sub in ("munge", "state", "log", "run", *(f"spool/{n}" for n in self.nodes)):
            (self.dir / sub).mkdir(parents=True)
        (self.dir / "munge").chmod(0o700)
        self._check("mungekey", "--create", f"--keyfile={self.dir}/munge/munge.key")
        self.ports = {name: free_port() for name in ["slurmctld", *self.nodes, *self.dead_nodes]}
        host = socket.gethostname().split(".", 1)[0]
        lines = [
            f"NodeName={n} NodeHostname={host} NodeAddr={LOCALHOST} Port={self.ports[n]}"
            for n in [*self.nodes, *self.dead_nodes]
        ]
        if self.cloud_nodes:
            # Never pinged while powered down; one port nobody listens on serves them all.
            cloud_port = free_port()
            lines += [
                f"NodeName={n} NodeHostname={host} NodeAddr={LOCALHOST} Port={cloud_port} State=CLOUD"
                for n in self.cloud_nodes
            ]
        params = ",".join(filter(None, [FAST_SCHEDULING, self.scheduler_parameters]))
        if self.gpus:
            self._write_gres_conf()
        self.conf_path.write_text(
            SLURM_CONF.format(
                cluster_name=f"nw{os.getpid()}n{next(_CLUSTER_NUMBERS)}",
                host=host,
                addr=LOCALHOST,
                ctld_port=self.ports["slurmctld"],
                dir=self.dir,
                slurmd_timeout=self.slurmd_timeout,
                cpus=self.cpus,
                scheduler_parameters=params,
                node_lines="\n".join(lines),
                cloud_settings=CLOUD_SETTINGS if self.cloud_nodes else "",
                gres_types="GresTypes=gpu\n" if self.gpus else "",
                gres=f" Gres=gpu:{self.gpus}" if self.gpus else "",
                extra_conf=self.extra_conf.strip() + "\n" if self.extra_conf.strip() else "",
            )
        )

    def _write_gres_conf(self) -> None:
        """One character device per GPU (major 195, as /dev/nvidiaN) and a gres.conf naming them."""
        assert self.dir is not None
        dev = self.dir / "dev"
        dev.mkdir()
        for index in range(self.gpus):
            os.mknod(dev / f"nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(195, index))
        last = self.gpus - 1
        files = f"{dev}/nvidia[0-{last}]" if last else f"{dev}/nvidia0"
        (self.dir / "gres.conf").write_text(f"Name=gpu File={files}\n")

    def _start_munged(self) -> None:
        assert self.dir is not None
        munge = self.dir / "munge"
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "-f",
                f"--socket={munge}/munge.sock",
                f"--key-file={munge}/munge.key",
                f"--pid-file={munge}/munged.pid",
                f"--seed-file={munge}/munged.seed",
            ],
        )
        self._wait(lambda: (munge / "munge.sock").exists(), "munged's socket", poll=0.01)

    def _start_slurmctld(self) -> None:
        # -i: ignore state left by a crashed earlier run; -D: foreground, so its PID is ours.
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf_path)])
        self._wait(self._slurmctld_up, "slurmctld to answer", poll=0.02)

    def _slurmctld_up(self) -> bool:
        # Short: if another process took the port, it may accept and never answer (scontrol waits 10 s).
        try:
            return "UP" in self.run("scontrol", "ping", check=False, timeout=2).stdout
        except subprocess.TimeoutExpired:
            return False

    def _idle_count(self) -> int:
        out = self.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", check=False).stdout.split()
        return sum(1 for name in self.nodes if name in out)

    def _spawn(self, name: str, command: list[str]) -> None:
        assert self.dir is not None
        with open(self.dir / "log" / f"{name}.out", "wb") as log:
            self.processes[name] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _check(self, *command: str) -> None:
        subprocess.run(command, check=True, capture_output=True, timeout=COMMAND_TIMEOUT)

    def _wait(self, ready: Callable[[], object], what: str, timeout: float = START_TIMEOUT, poll: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited {process.returncode} while waiting for {what}:\n" + self.log_tail(name)
                    )
            if ready():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {timeout:.0f} s waiting for {what}:\n" + self.log_tail("slurmctld")
                )
            time.sleep(poll)

    def log_tail(self, name: str, lines: int = 20) -> str:
        if self.dir is None:
            return ""
        text = ""
        for path in (self.dir / "log" / f"{name}.log", self.dir / "log" / f"{name}.out"):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, name: str, sig: int) -> None:
        process = self.processes.get(name)
        if process is not None and process.poll() is None:
            process.send_signal(sig)

    def _reap(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None:
            return
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def _kill_job_processes(self) -> None:
        """SIGKILL our slurmstepd processes and their jobs: they outlive slurmd (they are not our children).

        A slurmstepd is ours when its environment holds SLURM_CONF=<our slurm.conf> (it inherits
        slurmd's, and that path is unique to this cluster); its descendants are the job's processes.
        """
        marker = f"SLURM_CONF={self.conf_path}".encode()
        children: dict[int, list[int]] = {}
        steps = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
                children.setdefault(int(rest.split()[1]), []).append(int(entry.name))
                if comm == "slurmstepd" and marker in (entry / "environ").read_bytes().split(b"\0"):
                    steps.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
        victims, stack = [], list(steps)
        while stack:
            pid = stack.pop()
            victims.append(pid)
            stack.extend(children.get(pid, []))
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _die_with_parent() -> None:
    """Runs in each daemon before exec: SIGTERM it if we die without stop() (a killed test worker).

    Linux's PR_SET_PDEATHSIG fires when the *thread* that started the daemon ends, so start a
    cluster from a thread that outlives it (the main one).
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a throw-away Slurm cluster until Ctrl-C.")
    parser.add_argument("nodes", nargs="*", default=["gpu-s-01", "gpu-s-02", "gpu-s-03"])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop cleanly on kill, as on Ctrl-C
    with SlurmCluster(args.nodes) as slurm:
        print(f"export SLURM_CONF={slurm.conf_path}   # up in {slurm.started_in:.2f} s; Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
