"""IPMI driver: ``ipmitool -I lanplus`` as a subprocess, one process per call.

The password goes to ipmitool in the IPMI_PASSWORD environment variable (``-E``),
never on the command line, where any local user could read it in ``ps``.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from .base import (
    BmcAuthError,
    BmcDriver,
    BmcError,
    BmcInventory,
    BmcTimeout,
    BmcUnreachable,
    BmcUnsupported,
    PowerAction,
    PowerState,
    check_boot_target,
)

DEFAULT_PORT = 623
# Cipher suite 3 (RAKP-HMAC-SHA1, AES-CBC-128) is the one every lanplus BMC speaks; without -C,
# ipmitool 1.8.19 first asks for the suites, which ipmi_sim and some BMCs cannot answer (10 s lost).
CIPHER_SUITE = "3"

_POWER_COMMANDS = {
    PowerAction.ON: "on",
    PowerAction.FORCE_OFF: "off",
    PowerAction.GRACEFUL_SHUTDOWN: "soft",
    PowerAction.FORCE_RESTART: "reset",
    PowerAction.POWER_CYCLE: "cycle",
}
_BOOT_DEVICES = {"pxe": "pxe", "disk": "disk", "cd": "cdrom", "bios": "bios"}
_POWER_STATUS = re.compile(r"Chassis Power is (on|off)")
# ipmitool -v wording, by cause (lanplus, 1.8.19).
_AUTH_MARKERS = ("RAKP", "unauthorized name", "Invalid user name", "privilege")
_UNREACHABLE_MARKERS = ("Get Auth Capabilities error", "No response", "Unable to establish", "Address lookup")
# What -v prints on every session, failed or not (the VSO probe fails on all but PICMG hardware).
_NOISE = (
    "Loading IANA PEN Registry",
    "Running Get VSO Capabilities",
    "Invalid completion code received: Invalid command",
    "Discovered IPMB address",
)


def split_address(address: str) -> tuple[str, int]:
    """'host', 'host:port' or '[v6]:port' -> (host, port)."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest.lstrip(":") or DEFAULT_PORT)
    host, sep, port = address.rpartition(":")
    if sep and host and ":" not in host and port.isdigit():
        return host, int(port)
    return address, DEFAULT_PORT


def parse_colon_fields(text: str) -> dict[str, str]:
    """'Key : Value' lines (fru print, mc info, mc guid) -> {Key: Value}; the first of a repeated key wins."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and value.strip():
            fields.setdefault(key.strip(), value.strip())
    return fields


def parse_sel(text: str) -> list[dict[str, Any]]:
    """`sel list` as printed under -v (one "Key : Value" block per record) -> one dict per record.

    Keys: id (int), timestamp, sensor ("Temperature #0x30"), event ("Upper Critical
    going high"), state ("Asserted"/"Deasserted"), record_type; OEM records carry
    what they carry.
    """
    entries = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields = parse_colon_fields(block)
        if "SEL Record ID" not in fields:
            continue
        sensor = " ".join(
            filter(
                None,
                [fields.get("Sensor Type"), f"#0x{fields['Sensor Number']}" if fields.get("Sensor Number") else None],
            )
        )
        direction = fields.get("Event Direction", "")
        entries.append(
            {
                "id": int(fields["SEL Record ID"], 16),  # ipmitool prints record ids in hex
                "timestamp": fields.get("Timestamp"),
                "sensor": sensor or None,
                "event": fields.get("Description"),
                "state": "Deasserted" if direction.startswith("Deassertion") else "Asserted" if direction else None,
                "record_type": fields.get("Record Type"),
            }
        )
    return entries


def _meaningful(output: str) -> str:
    return "\n".join(line.strip() for line in output.splitlines() if line.strip() and not line.startswith(_NOISE))


class IpmiDriver(BmcDriver):
    """An IPMI 2.0 BMC over RMCP+ (lanplus)."""

    def __init__(
        self, address: str, *, username: str, password: str, timeout: float = 10.0, ipmitool: str = "ipmitool"
    ) -> None:
        self.host, self.port = split_address(address)
        self.username = username
        self._password = password
        self.timeout = timeout
        self.ipmitool = ipmitool

    def __repr__(self) -> str:
        return f"<IpmiDriver {self.where}>"

    @property
    def where(self) -> str:
        return f"IPMI BMC {self.host}:{self.port}"

    # --- plumbing ---------------------------------------------------------
    def _command(self, args: tuple[str, ...]) -> list[str]:
        # ipmitool sends each request twice at most (-R 1), waiting -N s each: ~2N s per call in all.
        per_try = max(1, int(self.timeout // 2))
        return [
            self.ipmitool,
            "-I",
            "lanplus",
            "-C",
            CIPHER_SUITE,
            "-H",
            self.host,
            "-p",
            str(self.port),
            "-U",
            self.username,
            "-E",
            "-N",
            str(per_try),
            "-R",
            "1",
            # Only -v says why a session failed (bad password vs. no answer). It chats on stderr and
            # turns `sel list` into one block per record (parse_sel reads that); the rest is unchanged.
            "-v",
            *args,
        ]

    def _run(self, what: str, *args: str, absent: tuple[str, ...] = ()) -> str | None:
        """ipmitool's stdout; None when the output says the BMC lacks the thing (``absent``)."""
        env = {**os.environ, "IPMI_PASSWORD": self._password}
        guard = max(self.timeout, 2 * max(1, int(self.timeout // 2))) + 2
        try:
            done = subprocess.run(self._command(args), env=env, capture_output=True, text=True, timeout=guard)
        except FileNotFoundError as exc:
            raise BmcUnsupported(
                f"{what} at {self.where}: {self.ipmitool!r} is not installed here (apt-get install ipmitool)."
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise BmcTimeout(
                f"{what} at {self.where}: ipmitool gave no answer within {guard:g} s.", retryable=True
            ) from exc
        output = _meaningful(done.stdout + "\n" + done.stderr)
        if absent and any(marker in output for marker in absent):
            return None
        if done.returncode != 0:
            raise self._failure(what, done.returncode, output)
        return done.stdout

    def _failure(self, what: str, returncode: int, output: str) -> BmcError:
        answer = output.replace("\n", "; ")[-400:] or f"exit status {returncode}"
        if any(marker in output for marker in _AUTH_MARKERS):
            return BmcAuthError(
                f"{what} at {self.where}: the BMC refused user {self.username!r} ({answer}); "
                "check the BMC username and password."
            )
        if any(marker in output for marker in _UNREACHABLE_MARKERS):
            return BmcUnreachable(f"{what} at {self.where}: no IPMI session ({answer}).")
        return BmcError(f"{what} at {self.where}: {answer}")

    # --- the driver API ---------------------------------------------------
    def power_state(self) -> PowerState:
        out = self._run("Reading the power state", "chassis", "power", "status") or ""
        found = _POWER_STATUS.search(out)
        return PowerState(found.group(1)) if found else PowerState.UNKNOWN

    def power(self, action: PowerAction) -> None:
        action = PowerAction(action)
        if action not in _POWER_COMMANDS:
            raise BmcUnsupported(
                f"Power action {action} at {self.where}: IPMI has no graceful restart; "
                "use graceful_shutdown then on, or force_restart."
            )
        self._run(f"Power action {action}", "chassis", "power", _POWER_COMMANDS[action])

    def set_boot_once(self, target: str) -> None:
        device = _BOOT_DEVICES[check_boot_target(target, self.where)]
        # No options=persistent: ipmitool's default is "next boot only". efiboot because GPU servers
        # boot UEFI, and a legacy override flips some BMCs (Supermicro) into legacy mode for good.
        self._run(f"Setting a one-time boot from {target}", "chassis", "bootdev", device, "options=efiboot")

    def inventory(self) -> BmcInventory:
        fru = parse_colon_fields(
            self._run("Reading the FRU", "fru", "print", "0", absent=("Device not present", "Unknown FRU")) or ""
        )
        mc = self._mc_info()
        guid = self._system_guid()
        return BmcInventory(
            manufacturer=fru.get("Product Manufacturer") or fru.get("Board Mfg"),
            model=fru.get("Product Name") or fru.get("Board Product"),
            serial=fru.get("Product Serial") or fru.get("Chassis Serial") or fru.get("Board Serial"),
            uuid=guid.get("System GUID"),
            bios_version=None,  # IPMI has no standard way to ask for it
            bmc_version=mc.get("Firmware Revision"),
            processor_count=None,
            memory_gib=None,
            health=None,
            firmware=self._firmware(mc),
            power_state=self.power_state(),
        )

    def _system_guid(self) -> dict[str, str]:
        try:
            return parse_colon_fields(self._run("Reading the system GUID", "mc", "guid") or "")
        except (BmcAuthError, BmcUnreachable, BmcTimeout):
            raise
        except BmcError:
            return {}  # an optional command; older BMCs answer "Invalid command"

    def _mc_info(self) -> dict[str, str]:
        return parse_colon_fields(self._run("Reading the BMC's device id", "mc", "info") or "")

    @staticmethod
    def _firmware(mc: dict[str, str]) -> dict[str, str]:
        return {"bmc": mc["Firmware Revision"]} if mc.get("Firmware Revision") else {}

    def firmware_inventory(self) -> dict[str, str]:
        return self._firmware(self._mc_info())

    def update_firmware(self, image_uri: str, targets: list[str] | None = None) -> None:
        raise BmcUnsupported(
            f"Firmware update at {self.where}: IPMI has no standard firmware update; "
            "use the vendor's tool or the BMC's Redfish interface."
        )

    def event_log(self, limit: int = 100) -> list[dict[str, Any]]:
        out = self._run("Reading the SEL", "sel", "list", absent=("SEL has no entries",)) or ""
        entries = parse_sel(out)
        return entries[-limit:] if limit > 0 else []
