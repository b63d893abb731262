"""A simulated InfiniBand fabric for tests and benchmarks: ibsim + opensm + the real diags.

``SimulatedFabric`` writes an ibsim topology (a ``GeneratedFabric`` or any .net text) to
a temporary folder, starts ``ibsim`` with its console on a FIFO and ``opensm`` as the
subnet manager, waits for "SUBNET UP", and then runs infiniband-diags against it
(LD_PRELOAD=libumad2sim.so) or the whole ``fabric.collector``. Faults go in through
ibsim's console: ``unlink``/``relink`` a cable, ``set_counter`` (PerformanceSet) and
``swap_cables`` (two Unlinks and two Links: ibsim can re-cable a live fabric). Each
waits, bounded, until the diags see the change. Everything is stopped and removed on
exit, test failure included. Recipe and caveats: shared/reference/real-components.md 1.

Parallel fabrics do not collide: each has its own IBSIM_SOCKNAME (the prefix of ibsim's
abstract sockets, read by ibsim and by umad2sim) and its own opensm cache/tmp folder.
ibsim has 10 client slots and a killed tool keeps its slot, so a tool that times out
is followed by dropping every client whose process is gone (console ``Attached``/``X``).
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from fabric import collector
from fabric.collector import CollectedOutputs, CollectorError, ToolResult, subprocess_runner
from fabric.ibdiags import COUNTER_NAMES, IbParseError, IbTopology, counter_name, parse_iblinkinfo, parse_perfquery
from fabric.topology import GeneratedFabric

UMAD2SIM_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so",
    "/usr/lib/*/umad2sim/libumad2sim.so",
    "/usr/lib/umad2sim/libumad2sim.so",
    "/usr/lib64/umad2sim/libumad2sim.so",
)
TOOLS = ("ibsim", "opensm", "ibnetdiscover", "iblinkinfo", "ibqueryerrors", "perfquery")
_End = tuple[str, int]
TRAFFIC_COUNTERS = {
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
}


def umad2sim_path() -> str | None:
    """The preload library that points libibumad programs at ibsim (Debian: libumad2sim0)."""
    for pattern in UMAD2SIM_CANDIDATES:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def missing_components() -> list[str]:
    """What a simulated fabric needs and this machine lacks (empty: it can run one)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if umad2sim_path() is None:
        missing.append("libumad2sim.so")
    return missing


class SimulatorError(RuntimeError):
    """ibsim or opensm would not start, refused a console command, or a fault never showed."""


def read_net(text: str) -> tuple[dict[str, str], dict[str, int], dict[_End, _End]]:
    """An ibsim topology's node descriptions (id -> description), port counts and cables."""
    names: dict[str, str] = {}
    ports: dict[str, int] = {}
    cables: dict[_End, _End] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(("Switch", "Hca", "Ca", "Rt")):
            first, rest = line.split('"', 1)
            current, _, comment = rest.partition('"')
            ports[current] = int(first.split()[1])
            desc = comment.partition("#")[2].strip()
            names[current] = desc[1 : desc.index('"', 1)] if desc.startswith('"') else current
        elif line.startswith("[") and current is not None:
            port = int(line[1 : line.index("]")])
            remote, _, after = line[line.index('"') + 1 :].partition('"')
            remote_port = int(after[1 : after.index("]")]) if after.startswith("[") else 1
            cables[(current, port)] = (remote, remote_port)
        elif not line.strip():
            current = None
    return names, ports, cables


class SimulatedFabric:
    """ibsim + opensm in a temporary folder; a context manager (see the module docstring)."""

    def __init__(
        self,
        fabric: GeneratedFabric | str,
        *,
        sweep_interval: int = 2,
        start_timeout: float = 15.0,
        tool_timeout: float = 20.0,
        wait_timeout: float = 15.0,
    ) -> None:
        self.net_text = fabric.net_file() if isinstance(fabric, GeneratedFabric) else fabric
        self.names, self.port_counts, self.cables = read_net(self.net_text)
        self.ids: dict[str, str] = {}  # description -> the first sim id with it
        for sim_id, name in self.names.items():
            self.ids.setdefault(name, sim_id)
        self.sweep_interval, self.start_timeout = sweep_interval, start_timeout
        self.tool_timeout, self.wait_timeout = tool_timeout, wait_timeout
        self.unlinked: dict[_End, _End] = {}
        self.dir: Path | None = None
        self.sockname = ""
        self._ibsim: subprocess.Popen[bytes] | None = None
        self._opensm: subprocess.Popen[bytes] | None = None
        self._fds: list[int] = []
        self._console_fd: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_net_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> SimulatedFabric:
        """A fabric from an ibsim topology file (e.g. one that differs from the plan)."""
        return cls(Path(path).read_text(), **kwargs)

    # --- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> SimulatedFabric:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        missing = missing_components()
        if missing:
            raise SimulatorError(
                f"cannot simulate a fabric: missing {', '.join(missing)} "
                "(apt-get install ibsim-utils libumad2sim0 infiniband-diags opensm)"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="nodewarden-ibsim-"))
        self.sockname = f"nw{os.getpid()}{secrets.token_hex(4)}"
        try:
            self._start_ibsim()
            self._start_opensm()
        except BaseException:
            self.stop()
            raise

    def _start_ibsim(self) -> None:
        assert self.dir is not None
        (self.dir / "fabric.net").write_text(self.net_text)
        fifo = self.dir / "console"
        os.mkfifo(fifo)
        # Read-write, like the shell's '<>': ibsim's console never sees EOF while it runs.
        console_in = os.open(fifo, os.O_RDWR)
        self._fds.append(console_in)
        with open(self.dir / "ibsim.log", "wb") as log:
            self._ibsim = subprocess.Popen(
                ["ibsim", "-s", "fabric.net"],
                stdin=console_in,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=self.env(preload=False),
                start_new_session=True,
            )
        self._console_fd = os.open(fifo, os.O_WRONLY)
        self._fds.append(self._console_fd)
        self._wait_log("ibsim.log", "Network simulator ready", self._ibsim)
        self._wait_log("ibsim.log", "sim> ", self._ibsim)

    def _start_opensm(self) -> None:
        assert self.dir is not None
        # Without force_log_flush "SUBNET UP" may reach the log too late to be polled.
        (self.dir / "osm.conf").write_text(f"sweep_interval {self.sweep_interval}\nforce_log_flush TRUE\n")
        env = {**self.env(), "OSM_TMP_DIR": str(self.dir), "OSM_CACHE_DIR": str(self.dir)}
        with open(self.dir / "opensm.out", "wb") as out:
            argv = ["opensm", "-F", str(self.dir / "osm.conf"), "-f", str(self.dir / "osm.log")]
            self._opensm = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir, env=env, start_new_session=True
            )
        self._wait_log("osm.log", "SUBNET UP", self._opensm)

    def stop(self) -> None:
        """Stop opensm and ibsim (ours, by PID) and remove the folder; safe to call twice."""
        for proc in (self._opensm, self._ibsim):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._opensm = self._ibsim = None
        for fd in self._fds:
            os.close(fd)
        self._fds, self._console_fd = [], None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def env(self, *, preload: bool = True) -> dict[str, str]:
        """The environment for a program to use this fabric (IBSIM_SOCKNAME, LD_PRELOAD)."""
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SIM_HOST")}
        env["IBSIM_SOCKNAME"] = self.sockname
        if preload:
            env["LD_PRELOAD"] = umad2sim_path() or ""
        return env

    def _wait_log(self, name: str, text: str, proc: subprocess.Popen[bytes]) -> None:
        assert self.dir is not None
        deadline = time.monotonic() + self.start_timeout
        path = self.dir / name
        while time.monotonic() < deadline:
            if path.exists() and text.encode() in path.read_bytes():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        program: object = proc.args[0] if isinstance(proc.args, list) else proc.args  # started with a list
        raise SimulatorError(f"{program} did not print {text!r} (exit code {proc.poll()}); {name}: {self._tail(name)}")

    def _tail(self, name: str, size: int = 1500) -> str:
        path = self.dir / name if self.dir else None
        if path is None or not path.exists():
            return "(none)"
        data = path.read_bytes()[-size:].decode(errors="replace")
        return "".join(line for line in data.splitlines(keepends=True) if "parse_port_connection_data" not in line)

    # --- the console --------------------------------------------------------------------------

    def console(self, command: str, timeout: float = 5.0) -> str:
        """Send one line to ibsim's console and return its answer; "# ..." answers are
        refusals and raise SimulatorError."""
        if self._console_fd is None or self.dir is None:
            raise SimulatorError("the simulated fabric is not running")
        log = self.dir / "ibsim.log"
        with self._lock:
            offset = log.stat().st_size
            os.write(self._console_fd, command.encode() + b"\n")
            deadline = time.monotonic() + timeout
            while True:
                with open(log, "rb") as f:
                    f.seek(offset)
                    new = f.read().decode(errors="replace")
                if "sim> " in new:
                    break
                if time.monotonic() > deadline:
                    raise SimulatorError(f"ibsim did not answer {command!r} within {timeout:g} s")
                time.sleep(0.01)
        answer = [line for line in new.split("sim> ", 1)[0].splitlines() if line and not line.startswith("ibwarn")]
        refused = [line for line in answer if line.startswith("#")]
        if refused:
            raise SimulatorError(f"ibsim refused {command!r}: {' '.join(refused)}")
        return "\n".join(answer)

    def drop_stale_clients(self) -> int:
        """Free the slots of clients whose process is gone (killed tools); returns how many."""
        dropped = 0
        for line in self.console("Attached").splitlines():
            words = line.replace(":", " ").split()
            if len(words) > 3 and words[0] == "Client" and words[2] == "pid":
                pid = int(words[3])
                if self._opensm is not None and pid == self._opensm.pid:
                    continue
                if not _alive(pid):
                    self.console(f"X {words[1]}")
                    dropped += 1
        return dropped

    # --- the diags ----------------------------------------------------------------------------

    def run(self, tool: str, *args: str, timeout: float | None = None, ok: Sequence[int] = (0,)) -> ToolResult:
        """Run one diag against the fabric (stderr without ibsim's attach notices)."""
        result = self._runner([tool, *args], timeout=timeout or self.tool_timeout, env=self.env(), cwd=str(self.dir))
        if result.returncode not in ok:
            raise CollectorError(tool, f"exit code {result.returncode}", result.stderr)
        return result

    def _runner(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ToolResult:
        try:
            return subprocess_runner(argv, timeout=timeout, env=env, cwd=cwd)
        except CollectorError:
            self.drop_stale_clients()  # a killed tool keeps one of ibsim's 10 client slots
            raise

    def collect(self, **kwargs: Any) -> CollectedOutputs:
        """fabric.collector.collect against this fabric."""
        kwargs.setdefault("timeout", self.tool_timeout)
        return collector.collect(
            runner=self._runner,
            sim_preload=umad2sim_path(),
            env={"IBSIM_SOCKNAME": self.sockname},
            cwd=str(self.dir),
            **kwargs,
        )

    def topology(self) -> IbTopology:
        return self.collect().parse()[0]

    def linkinfo(self) -> IbTopology:
        """iblinkinfo alone: the quickest look at port states."""
        return parse_iblinkinfo(self.run("iblinkinfo").stdout)

    # --- faults -------------------------------------------------------------------------------

    def sim_id(self, node: str) -> str:
        """ibsim's id for a node description ("leaf01") or an id itself ("S-leaf01")."""
        if node in self.names:
            return node
        if node in self.ids:
            return self.ids[node]
        raise SimulatorError(f"no node {node!r} in this fabric")

    def unlink(self, node_name: str, port: int | None = None) -> list[tuple[_End, _End]]:
        """Pull the cable(s) of a node (or of one port); waits until the diags see the far
        ends Down. Returns the cables pulled, as ((id, port), (id, port))."""
        node = self.sim_id(node_name)
        ends = [(node, port)] if port is not None else [e for e in self.cables if e[0] == node]
        pulled = []
        for end in ends:
            if end not in self.cables:
                raise SimulatorError(f"{self.names[node]}/{end[1]} has no cable to pull")
            pulled.append((end, self.cables[end]))
        self.console(f'Unlink "{node}"' if port is None else f'Unlink "{node}"[{port}]')
        for here, there in pulled:
            del self.cables[here], self.cables[there]
            self.unlinked[here], self.unlinked[there] = there, here
        self.wait_until(
            lambda topo: all(self._state(topo, e) in (None, "Down") for c in pulled for e in c),
            f"{', '.join(self._label(h) for h, _ in pulled)} down",
        )
        return pulled

    def relink(self, node_name: str, port: int | None = None) -> list[tuple[_End, _End]]:
        """Plug back what ``unlink`` pulled on a node (or one port); waits until Active."""
        node = self.sim_id(node_name)
        ends = [e for e in self.unlinked if e[0] == node and (port is None or e[1] == port)]
        if not ends:
            raise SimulatorError(f"nothing was unlinked on {node_name}" + (f" port {port}" if port else ""))
        cables = [(end, self.unlinked[end]) for end in ends]
        for here, there in cables:
            self.link(here, there, wait=False)
        self.wait_until(
            lambda topo: all(self._state(topo, e) == "Active" for c in cables for e in c),
            f"{', '.join(self._label(h) for h, _ in cables)} Active",
        )
        return cables

    def link(self, a: tuple[str, int], b: tuple[str, int], *, wait: bool = True) -> None:
        """Cable two free ports, (node, port) each; waits until both are Active."""
        a, b = (self.sim_id(a[0]), a[1]), (self.sim_id(b[0]), b[1])
        self.console(f'Link "{a[0]}"[{a[1]}] "{b[0]}"[{b[1]}]')
        self.cables[a], self.cables[b] = b, a
        self.unlinked.pop(a, None)
        self.unlinked.pop(b, None)
        if wait:
            self.wait_until(
                lambda topo: self._state(topo, a) == "Active" == self._state(topo, b),
                f"{self._label(a)} <-> {self._label(b)} Active",
            )

    def swap_cables(self, a: tuple[str, int], b: tuple[str, int]) -> None:
        """Exchange the far ends of the cables on ports ``a`` and ``b`` ((node, port) each):
        A-X and B-Y become A-Y and B-X, live. Waits until the new cables are Active."""
        a, b = (self.sim_id(a[0]), a[1]), (self.sim_id(b[0]), b[1])
        if a not in self.cables or b not in self.cables:
            raise SimulatorError("both ports need a cable to swap")
        x, y = self.cables[a], self.cables[b]
        for end in (a, b):
            self.console(f'Unlink "{end[0]}"[{end[1]}]')
            other = self.cables.pop(end)
            del self.cables[other]
        self.link(a, y, wait=False)
        self.link(b, x, wait=False)
        self.wait_until(
            lambda topo: (
                all(self._state(topo, e) == "Active" for e in (a, b, x, y))
                and self._peer_name(topo, a) == self._label(y)
                and self._peer_name(topo, b) == self._label(x)
            ),
            f"{self._label(a)} <-> {self._label(y)} and {self._label(b)} <-> {self._label(x)}",
        )

    def set_counter(self, node_name: str, port: int, counter: str, value: int) -> None:
        """Set a port counter by its IBTA name ("SymbolErrorCounter", or with the
        attribute: "PortCountersExtended.PortXmitData"); waits until perfquery reads it."""
        node = self.sim_id(node_name)
        attribute, _, field = counter.rpartition(".")
        if field not in COUNTER_NAMES:
            raise SimulatorError(f"unknown counter {counter!r} (IBTA names: {', '.join(COUNTER_NAMES)})")
        attribute = attribute or "PortCounters"
        self.console(f'PerformanceSet "{node}"[{port}] {attribute}.{field}={value}')
        extended = ["-x"] if attribute == "PortCountersExtended" else []
        want = counter_name(field)

        def seen(topo: IbTopology) -> bool:
            lid = self._lid(topo, node)
            if lid is None:
                return False
            got = parse_perfquery(self.run("perfquery", *extended, str(lid), str(port)).stdout).counters.get(want)
            # Data and packet counters keep counting (the SM's and the diags' own MADs).
            return got is not None and (got >= value if want in TRAFFIC_COUNTERS else got == value)

        self.wait_until(seen, f"{self.names[node]}/{port} {field}={value} in perfquery")

    def wait_until(self, predicate: Callable[[IbTopology], bool], what: str, timeout: float | None = None) -> None:
        """Poll iblinkinfo until ``predicate`` holds, at most ``timeout`` (wait_timeout) seconds."""
        deadline = time.monotonic() + (timeout or self.wait_timeout)
        while True:
            try:
                topo: IbTopology | None = self.linkinfo()
            except IbParseError:
                # Read while the SM reassigns addresses (a LID briefly on two devices): not there yet.
                if time.monotonic() > deadline:
                    raise
                topo = None
            if topo is not None and predicate(topo):
                return
            if time.monotonic() > deadline:
                raise SimulatorError(f"not seen within {timeout or self.wait_timeout:g} s: {what}")
            time.sleep(0.1)

    def _label(self, end: _End) -> str:
        return f"{self.names.get(end[0], end[0])}/{end[1]}"

    def _device(self, topo: IbTopology, sim_id: str) -> str | None:
        name = self.names.get(sim_id, sim_id)
        found = [d.guid for d in topo.devices.values() if d.name == name]
        return found[0] if len(found) == 1 else None

    def _state(self, topo: IbTopology, end: _End) -> str | None:
        """The port's state, None when its device is not on the fabric (cut off)."""
        guid = self._device(topo, end[0])
        state = topo.ports.get((guid, end[1])) if guid else None
        return state.state if state else None

    def _peer_name(self, topo: IbTopology, end: _End) -> str | None:
        guid = self._device(topo, end[0])
        peer = topo.peers().get((guid, end[1])) if guid else None
        return topo.endpoint_name(*peer) if peer else None

    def _lid(self, topo: IbTopology, sim_id: str) -> int | None:
        guid = self._device(topo, sim_id)
        return topo.devices[guid].lid if guid else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is gone for ibsim's purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True
