"""Real BMC emulators for tests and the demo: sushy-tools (Redfish) and ipmi_sim (IPMI).

Neither is a mock: each runs as its own process on 127.0.0.1 and is reached over
the network by the same drivers that talk to real BMCs.

* ``python -m sandbox.emulators.bmc --port P --systems-file F.json --state-dir D
  [--auth-file htpasswd] [--power-delay S]`` runs the sushy-tools Redfish
  emulator (its own Flask app) with ``NodewardenFakeDriver``: sushy-tools' fake
  driver plus BIOS versions (so its UpdateService SimpleUpdate works), CPU and
  memory totals from each system's entry, and a fixed power delay instead of the
  stock random 1-11 s.
* ``RedfishEmulator`` and ``IpmiSimulator`` start one in a throw-away directory
  on a free port, wait until it answers, and stop and clean up on exit.

This module must not import Django: the emulator process runs without it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid as uuid_module
from pathlib import Path
from types import TracebackType
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: sandbox/ is not installed
LOCALHOST = "127.0.0.1"
START_TIMEOUT = 15.0


# --- The Redfish emulator process ------------------------------------------------------
def _make_fake_driver() -> type:
    """NodewardenFakeDriver, built on first use so importing this module needs no sushy-tools."""
    from sushy_tools import error
    from sushy_tools.emulator.resources.systems.fakedriver import FakeDriver

    class NodewardenFakeDriver(FakeDriver):  # type: ignore[misc]  # sushy-tools has no type information
        """sushy-tools' FakeDriver, plus what a GPU server's BMC reports and a fixed power delay.

        Each system's entry may carry ``bios_version`` (kept in the driver's state like
        the power state, so SimpleUpdate can bump it), ``memory_gib``, ``cpus`` and
        ``power_delay`` (seconds, overriding ``NODEWARDEN_FAKE_POWER_DELAY``).
        """

        def _required(self, identity: str, key: str) -> Any:
            value = self._get(identity).get(key)
            if value is None:
                raise error.NotSupportedError(f"{key} is not configured for this fake system")
            return value

        def get_versions(self, identity: str) -> dict[str, str]:
            return {"BiosVersion": self._required(identity, "bios_version")}

        def set_versions(self, identity: str, firmware_versions: dict[str, str]) -> None:
            self._update(identity, bios_version=firmware_versions["BiosVersion"])

        def get_total_memory(self, identity: str) -> Any:
            return self._required(identity, "memory_gib")

        def get_total_cpus(self, identity: str) -> Any:
            return self._required(identity, "cpus")

        def set_power_state(self, identity: str, state: str) -> None:
            # The stock driver's logic with a fixed (float) delay instead of randint(1, 11) whole seconds.
            system = self._get(identity)
            delay = float(system.get("power_delay", self._config.get("NODEWARDEN_FAKE_POWER_DELAY", 0.0)))
            if "On" in state:
                pending = "On"
            elif state in ("ForceOff", "GracefulShutdown"):
                pending = "Off"
            elif "Restart" in state:
                system["power_state"] = "Off"
                pending = state
            else:
                raise error.NotSupportedError(f"Power state {state} is not supported")
            if system["power_state"] != pending:
                self._update(system, pending_power={"power_state": pending, "apply_time": time.time() + delay})

    return NodewardenFakeDriver


def normalise_system(system: dict[str, Any], index: int) -> dict[str, Any]:
    """A systems-file entry with the keys sushy-tools' fake driver requires filled in."""
    system = copy.deepcopy(system)
    system.setdefault("uuid", str(uuid_module.uuid4()))
    system.setdefault("name", f"gpu-node-{index + 1:02d}")
    system.setdefault("power_state", "On")
    system.setdefault("external_notifier", False)
    system.setdefault("nics", [{"mac": f"02:00:00:00:00:{index + 1:02x}", "ip": LOCALHOST}])
    return system


def run_redfish_emulator(
    port: int, systems: list[dict[str, Any]], state_dir: str, *, auth_file: str | None = None, power_delay: float = 0.0
) -> None:
    """Serve sushy-tools' Redfish app with NodewardenFakeDriver on 127.0.0.1:port until killed."""
    from sushy_tools.emulator import main as sushy_main
    from sushy_tools.emulator.resources.systems import fakedriver

    # main.Application.systems looks up fakedriver.FakeDriver when first asked for the
    # systems: swapping the module attribute is the one hook, and touches no route.
    fakedriver.FakeDriver = _make_fake_driver()
    config: dict[str, Any] = {
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [normalise_system(s, i) for i, s in enumerate(systems)],
        "SUSHY_EMULATOR_STATE_DIR": state_dir,
        "NODEWARDEN_FAKE_POWER_DELAY": power_delay,
    }
    if auth_file:
        config["SUSHY_EMULATOR_AUTH_FILE"] = auth_file
    sushy_main.app.configure(extra_config=config)
    sushy_main.app.run(host=LOCALHOST, port=port, threaded=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.emulators.bmc", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--systems-file",
        required=True,
        help="JSON list of systems (uuid, name, power_state, bios_version, memory_gib, cpus, power_delay, nics)",
    )
    parser.add_argument("--state-dir", required=True, help="where the emulator keeps power and BIOS state")
    parser.add_argument("--auth-file", help="htpasswd file (bcrypt hashes only)")
    parser.add_argument(
        "--power-delay",
        type=float,
        default=0.0,
        help="seconds before a power change shows (default 0; the stock driver waits 1-11 s)",
    )
    args = parser.parse_args(argv)
    systems = json.loads(Path(args.systems_file).read_text())
    run_redfish_emulator(args.port, systems, args.state_dir, auth_file=args.auth_file, power_delay=args.power_delay)
    return 0


# --- Helpers that run them ---------------------------------------------------------------
def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nothing listens on right now (TCP by default, UDP with SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class _EmulatorProcess:
    """Shared lifecycle: a temporary directory, one child process, stop on exit."""

    name = "emulator"

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        _stop(self.process)
        self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _spawn(self, command: list[str], **kwargs: Any) -> None:
        assert self.workdir is not None
        with open(self.workdir / f"{self.name}.log", "wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs
            )

    def log_tail(self) -> str:
        path = self.workdir / f"{self.name}.log" if self.workdir else None
        return path.read_text(errors="replace")[-2000:] if path and path.exists() else ""

    def _fail(self, why: str) -> RuntimeError:
        tail = self.log_tail()
        self.stop()
        return RuntimeError(f"{self.name} did not start: {why}\n{tail}")


class RedfishEmulator(_EmulatorProcess):
    """sushy-tools serving ``systems`` on a free port, behind basic auth.

    >>> with RedfishEmulator([{"name": "gpu-node-01", "bios_version": "1.0.0"}]) as bmc:
    ...     bmc.url, bmc.username, bmc.password, bmc.systems[0]["uuid"]
    """

    name = "sushy-emulator"

    def __init__(
        self,
        systems: list[dict[str, Any]] | None = None,
        *,
        username: str = "admin",
        password: str | None = None,
        power_delay: float = 0.0,
    ) -> None:
        super().__init__()
        self.systems = [normalise_system(s, i) for i, s in enumerate(systems or [{}])]
        self.username = username
        self.password = password or secrets.token_urlsafe(12)
        self.power_delay = power_delay
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    def system_path(self, index: int = 0) -> str:
        return f"/redfish/v1/Systems/{self.systems[index]['uuid']}"

    def set_power(self, on: bool, index: int = 0) -> None:
        """Put a system on or off through the emulator's own API (test and demo set-up)."""
        import requests

        response = requests.post(
            f"{self.url}{self.system_path(index)}/Actions/ComputerSystem.Reset",
            json={"ResetType": "On" if on else "ForceOff"},
            auth=(self.username, self.password),
            timeout=5,
        )
        response.raise_for_status()

    def system(self, index: int = 0) -> dict[str, Any]:
        """The system's Redfish resource as the emulator serves it now."""
        import requests

        response = requests.get(f"{self.url}{self.system_path(index)}", auth=(self.username, self.password), timeout=5)
        response.raise_for_status()
        system: dict[str, Any] = response.json()
        return system

    def start(self) -> None:
        import bcrypt

        self.workdir = Path(tempfile.mkdtemp(prefix="nodewarden-redfish-"))
        (self.workdir / "state").mkdir()
        (self.workdir / "systems.json").write_text(json.dumps(self.systems))
        # Cost 4, not bcrypt's 12: the emulator checks the hash on every request (~0.25 s each at 12).
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        (self.workdir / "htpasswd").write_text(f"{self.username}:{hashed}\n")
        for _ in range(3):  # another process may take the free port before the emulator binds it
            self.port = free_port()
            self._spawn(self._command(), cwd=PROJECT_ROOT, env=self._env())
            if self._wait_until_serving():
                return
            if "Address already in use" not in self.log_tail():
                raise self._fail(f"no answer on {self.url}/redfish/v1/ within {START_TIMEOUT:g} s")
            _stop(self.process)
        raise self._fail("no free port")

    def _command(self) -> list[str]:
        assert self.workdir is not None
        return [
            sys.executable,
            "-m",
            "sandbox.emulators.bmc",
            "--port",
            str(self.port),
            "--systems-file",
            str(self.workdir / "systems.json"),
            "--state-dir",
            str(self.workdir / "state"),
            "--auth-file",
            str(self.workdir / "htpasswd"),
            "--power-delay",
            str(self.power_delay),
        ]

    @staticmethod
    def _env() -> dict[str, str]:
        path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path}

    def _wait_until_serving(self) -> bool:
        import requests

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                # The service root answers without credentials, as on real BMCs.
                if requests.get(f"{self.url}/redfish/v1/", timeout=1).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        return False


# ipmi_sim runs this as "PROG <state-file> get power" / "PROG <state-file> set power 0"; it keeps
# the chassis state in a file, so power survives between commands (recipe: shared/reference).
CHASSIS_CONTROL = r"""#!/bin/sh
f="$1"; shift; op="$1"; shift
[ -f "$f" ] || echo "power=1" > "$f"
. "$f"
case "$op" in
get) for k in "$@"; do
       case "$k" in power) echo "power:${power:-1}";; boot) echo "boot:${boot:-default}";; esac
     done ;;
set) while [ $# -gt 0 ]; do k="$1"; v="$2"; shift 2
       case "$k" in
         power) power="$v";;
         shutdown) power=0;;
         boot) boot="$v";;
       esac
       echo "$(date +%s.%N) set $k $v" >> "$f.log"
     done
     printf 'power=%s\nboot=%s\n' "${power:-1}" "${boot:-default}" > "$f" ;;
esac
exit 0
"""

# One SEL record (type 0x02, system event): temperature sensor 0x30, upper critical going high.
TEMPERATURE_CRITICAL_EVENT = (0x02, [0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x04, 0x01, 0x30, 0x01, 0x59, 0x00, 0x00])


def _type_length(text: str) -> bytes:
    data = text.encode("ascii")
    if len(data) > 63:
        raise ValueError(f"FRU field {text!r} is longer than 63 bytes")
    return bytes([0xC0 | len(data)]) + data  # 0xC0: 8-bit ASCII


def _fru_area(body: bytes) -> bytes:
    """An IPMI FRU info area: fields, end marker, padding to 8 bytes, zero checksum."""
    area = bytearray(body) + b"\xc1"
    while (len(area) + 1) % 8:
        area.append(0)
    area[1] = (len(area) + 1) // 8
    return bytes(area) + bytes([-sum(area) & 0xFF])


def fru_image(*, manufacturer: str, product: str, serial: str, part_number: str = "", version: str = "") -> bytes:
    """A FRU image (IPMI Platform Management FRU spec 1.0) with board and product areas."""
    board = _fru_area(
        bytes([1, 0, 0, 0, 0, 0]) + b"".join(_type_length(f) for f in (manufacturer, product, serial, part_number, ""))
    )
    product_area = _fru_area(
        bytes([1, 0, 0])
        + b"".join(_type_length(f) for f in (manufacturer, product, part_number, version, serial, "", ""))
    )
    header = bytearray([1, 0, 0, 1, 1 + len(board) // 8, 0, 0])
    header.append(-sum(header) & 0xFF)
    return bytes(header) + board + product_area


class IpmiSimulator(_EmulatorProcess):
    """``ipmi_sim`` (OpenIPMI) as one BMC on a free UDP port, with power control and a SEL.

    ``fru`` (manufacturer, product, serial, part_number, version) gives it FRU data;
    without it ``fru print`` answers "Device not present", as on BMCs with no FRU.
    ``power_log`` lists every chassis request ipmi_sim passed on ("set power 0", ...).
    """

    name = "ipmi_sim"

    def __init__(
        self,
        *,
        username: str = "admin",
        password: str | None = None,
        fru: dict[str, str] | None = None,
        sel_events: list[tuple[int, list[int]]] | None = None,
    ) -> None:
        super().__init__()
        self.username = username
        self.password = password or secrets.token_hex(8)  # IPMI 2.0 passwords are at most 20 bytes
        self.fru = fru
        self.sel_events = [TEMPERATURE_CRITICAL_EVENT] if sel_events is None else sel_events
        self.port = 0

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def power_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "state" / "power"

    @property
    def power_log(self) -> list[str]:
        log = self.power_file.with_name("power.log")
        return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []

    def start(self) -> None:
        if shutil.which("ipmi_sim") is None:
            raise RuntimeError("ipmi_sim is not installed (apt-get install openipmi)")
        self.workdir = Path(tempfile.mkdtemp(prefix="nodewarden-ipmi-"))
        (self.workdir / "state").mkdir()
        control = self.workdir / "chassisctl.sh"
        control.write_text(CHASSIS_CONTROL)
        control.chmod(0o755)
        self.port = free_port(socket.SOCK_DGRAM)
        (self.workdir / "lan.conf").write_text(self._lan_config(control))
        (self.workdir / "bmc.emu").write_text(self._emu_commands())
        self._spawn(
            [
                "ipmi_sim",
                "-c",
                str(self.workdir / "lan.conf"),
                "-f",
                str(self.workdir / "bmc.emu"),
                "-s",
                str(self.workdir / "state"),
                "-n",
            ]
        )
        if not self._wait_until_bound():
            raise self._fail(f"UDP {self.address} was not bound within {START_TIMEOUT:g} s")

    def _lan_config(self, control: Path) -> str:
        auths = "none md2 md5 straight"
        # ipmi_sim expands no variables: every path is written out in full.
        return "\n".join(
            [
                f'name "nodewarden-sim-{self.port}"',
                "set_working_mc 0x20",
                "  startlan 1",
                f"    addr {LOCALHOST} {self.port}",
                "    priv_limit admin",
                *(f"    allowed_auths_{level} {auths}" for level in ("callback", "user", "operator", "admin")),
                f"    guid {uuid_module.uuid4().hex}",
                "  endlan",
                f'  chassis_control "{control} {self.workdir}/state/power"',
                f'  user 2 true "{self.username}" "{self.password}" admin 10 {auths}',
                "",
            ]
        )

    def _emu_commands(self) -> str:
        lines = [
            "mc_setbmc 0x20",
            # device id 0, rev 3, firmware 9.08, IPMI 2.0, sensor/SDR/SEL/FRU/event/chassis support
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr",
            "sel_enable 0x20 1000 0x0a",
        ]
        if self.fru:
            image = fru_image(**self.fru)
            lines.append(f"mc_add_fru_data 0x20 0 {len(image):#x} data " + " ".join(f"{b:#04x}" for b in image))
        for record_type, data in self.sel_events:
            lines.append(f"sel_add 0x20 {record_type:#04x} " + " ".join(f"{b:#04x}" for b in data))
        lines.append("mc_enable 0x20")
        return "\n".join(lines) + "\n"

    def _wait_until_bound(self) -> bool:
        """Until ipmi_sim holds its UDP port (read from /proc: probing with ipmitool costs 2 s a miss)."""
        wanted = f"0100007F:{self.port:04X}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            with open("/proc/net/udp") as table:
                if any(line.split()[1] == wanted for line in list(table)[1:]):
                    return True
            time.sleep(0.02)
        return False

    def set_power(self, on: bool) -> None:
        """Set the simulated chassis power directly (test set-up, not a BMC request)."""
        self.power_file.write_text(f"power={1 if on else 0}\nboot=default\n")


if __name__ == "__main__":
    sys.exit(main())
