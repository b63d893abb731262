"""Redfish driver, over the ``sushy`` library (HTTP basic auth).

Basic auth rather than sushy's session-or-basic: a session costs a POST and a
DELETE per call, BMCs cap concurrent sessions (a few per BMC on some vendors),
and the sushy-tools emulator has no SessionService at all.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import requests
import sushy
from sushy import exceptions as sushy_exc
from sushy.auth import BasicAuth
from sushy.connector import Connector

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

SYSTEMS_PATH = "/redfish/v1/Systems/"

_POWER_STATES = {sushy.PowerState.ON: PowerState.ON, sushy.PowerState.OFF: PowerState.OFF}
_RESET_TYPES = {
    PowerAction.ON: sushy.ResetType.ON,
    PowerAction.FORCE_OFF: sushy.ResetType.FORCE_OFF,
    PowerAction.GRACEFUL_SHUTDOWN: sushy.ResetType.GRACEFUL_SHUTDOWN,
    PowerAction.FORCE_RESTART: sushy.ResetType.FORCE_RESTART,
    PowerAction.GRACEFUL_RESTART: sushy.ResetType.GRACEFUL_RESTART,
    PowerAction.POWER_CYCLE: sushy.ResetType.POWER_CYCLE,
}
_BOOT_SOURCES = {
    "pxe": sushy.BootSource.PXE,
    "disk": sushy.BootSource.HDD,
    "cd": sushy.BootSource.CD,
    "bios": sushy.BootSource.BIOS_SETUP,
}
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")


class _SingleShotConnector(Connector):  # type: ignore[misc]  # sushy has no type information
    """sushy's connector with its own retries off: ``bmc.client`` owns the retry policy.

    Left alone, sushy retries a refused connection 3 times, 2 s apart, and a 5xx
    GET another 10 times, 3 s apart: one dead BMC would hold a worker for a minute.
    """

    def __init__(self, url: str, *, verify: bool, timeout: float) -> None:
        # 1, not 0: sushy reads 0 as "use the default" (3 connection attempts).
        super().__init__(
            url, verify=verify, server_side_retries=1, server_side_retries_delay=0, default_request_timeout=timeout
        )

    def _op(
        self,
        method: str,
        path: str = "",
        data: Any = None,
        headers: Any = None,
        blocking: bool = False,
        timeout: Any = None,
        server_side_retries_left: int | None = None,
        **kwargs: Any,
    ) -> Any:
        return super()._op(
            method,
            path,
            data=data,
            headers=headers,
            blocking=blocking,
            timeout=timeout,
            server_side_retries_left=0,
            **kwargs,
        )


def _connection_reason(cause: BaseException | None) -> str:
    """'[Errno 111] Connection refused' out of urllib3's nested message, else the exception's name."""
    text = str(cause) if cause else ""
    found = _ERRNO.search(text)
    if found:
        return found.group(0).strip()
    return type(cause).__name__ if cause else "connection failed"


def _answer(exc: sushy_exc.HTTPError) -> str:
    """The BMC's own words for a failed request: status, Redfish message and the URL."""
    return f"HTTP {exc.status_code} {exc.detail or exc.code} ({exc.message.split(' returned ')[0]})"


class RedfishDriver(BmcDriver):
    """A Redfish BMC. ``system_id`` picks the ComputerSystem; blank means the only one."""

    def __init__(
        self,
        address: str,
        *,
        username: str,
        password: str,
        system_id: str = "",
        verify_tls: bool = True,
        timeout: float = 10.0,
    ) -> None:
        # Real BMCs serve HTTPS only; a bare host therefore means https://.
        self.address = (address if "://" in address else f"https://{address}").rstrip("/")
        self.username = username
        self._password = password
        self.system_id = system_id
        self.verify_tls = verify_tls
        self.timeout = timeout
        self._conn: _SingleShotConnector | None = None
        self._root: sushy.Sushy | None = None

    def __repr__(self) -> str:
        return f"<RedfishDriver {self.address} system={self.system_id or '(only)'}>"

    @property
    def where(self) -> str:
        return f"Redfish BMC {self.address}"

    # --- plumbing ---------------------------------------------------------
    def _service_root(self) -> sushy.Sushy:
        if self._root is None:
            self._conn = _SingleShotConnector(self.address, verify=self.verify_tls, timeout=self.timeout)
            # Sushy() fetches the service root, which BMCs serve without credentials.
            self._root = sushy.Sushy(self.address, auth=BasicAuth(self.username, self._password), connector=self._conn)
        return self._root

    def _system(self) -> Any:
        """The ComputerSystem, fetched afresh (power state and versions change under us)."""
        root = self._service_root()
        if not self.system_id:
            return root.get_system()
        path = self.system_id if self.system_id.startswith("/") else SYSTEMS_PATH + quote(self.system_id)
        return root.get_system(path)

    def _get_json(self, path: str) -> dict[str, Any]:
        assert self._conn is not None  # noqa: S101 - set by _service_root(), always called first
        document: dict[str, Any] = self._conn.get(path).json()  # sushy has no type information
        return document

    @contextmanager
    def _speaking(self, what: str) -> Iterator[None]:
        """Turn sushy's and requests' exceptions into BmcErrors that say what, where and the answer."""
        where = self.where
        try:
            yield
        except sushy_exc.AccessError as exc:
            raise BmcAuthError(
                f"{what} at {where}: the BMC refused user {self.username!r} "
                f"({_answer(exc)}); check the BMC username and password."
            ) from exc
        except sushy_exc.ConnectionError as exc:
            raise self._connection_error(what, where, exc.__context__) from exc
        except sushy_exc.ServerSideError as exc:
            if exc.status_code == 501:
                raise BmcUnsupported(f"{what} at {where}: not implemented by this BMC ({_answer(exc)}).") from exc
            raise BmcError(f"{what} at {where}: the BMC failed ({_answer(exc)}).", retryable=True) from exc
        except sushy_exc.HTTPError as exc:
            raise BmcError(f"{what} at {where}: the BMC rejected the request ({_answer(exc)}).") from exc
        except (
            sushy_exc.MissingActionError,
            sushy_exc.MissingAttributeError,
            sushy_exc.InvalidParameterValueError,
        ) as exc:
            raise BmcUnsupported(f"{what} at {where}: not offered by this BMC ({exc.message}).") from exc
        except sushy_exc.UnknownDefaultError as exc:
            raise BmcError(f"{what} at {where}: {exc.message}; set the endpoint's system_id.") from exc
        except sushy_exc.SushyError as exc:
            raise BmcError(f"{what} at {where}: {exc.message}") from exc

    def _connection_error(self, what: str, where: str, cause: BaseException | None) -> BmcError:
        if isinstance(cause, requests.exceptions.SSLError):
            # Configuration, not a blip: retrying cannot help.
            return BmcUnreachable(
                f"{what} at {where}: TLS failed ({_connection_reason(cause)}); trust the "
                "BMC's certificate, or turn off verify_tls for this endpoint.",
                retryable=False,
            )
        if isinstance(cause, requests.exceptions.ReadTimeout):
            return BmcTimeout(f"{what} at {where}: no answer within {self.timeout:g} s.", retryable=True)
        if isinstance(cause, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema)):
            return BmcError(f"{what} at {where}: the address is not a usable URL.")
        return BmcUnreachable(f"{what} at {where}: cannot connect ({_connection_reason(cause)}).")

    @staticmethod
    def _first(system: Any, linked: str) -> Any:
        """The first linked Chassis or Manager of a system, or None where it links none."""
        try:
            items = getattr(system, linked)
        except sushy_exc.MissingAttributeError:
            return None
        return items[0] if items else None

    # --- the driver API ---------------------------------------------------
    def power_state(self) -> PowerState:
        with self._speaking("Reading the power state"):
            return _POWER_STATES.get(self._system().power_state, PowerState.UNKNOWN)

    def power(self, action: PowerAction) -> None:
        reset = _RESET_TYPES[PowerAction(action)]
        with self._speaking(f"Power action {action}"):
            system = self._system()
            allowed = system.get_allowed_reset_system_values()
            if reset not in allowed:
                offered = ", ".join(sorted(value.value for value in allowed))
                raise BmcUnsupported(
                    f"Power action {action} at {self.where}: the system does "
                    f"not offer {reset.value} (it offers {offered})."
                )
            system.reset_system(reset)

    def set_boot_once(self, target: str) -> None:
        source = _BOOT_SOURCES[check_boot_target(target, self.where)]
        with self._speaking(f"Setting a one-time boot from {target}"):
            system = self._system()
            allowed = system.get_allowed_system_boot_source_values()
            if source not in allowed:
                offered = ", ".join(sorted(value.value for value in allowed))
                raise BmcUnsupported(
                    f"Setting a one-time boot from {target} at {self.where}: the system does "
                    f"not offer {source.value} (it offers {offered})."
                )
            system.set_system_boot_options(target=source, enabled=sushy.BootSourceOverrideEnabled.ONCE)

    def inventory(self) -> BmcInventory:
        with self._speaking("Reading the inventory"):
            system = self._system()
            doc = system.json
            # Some BMCs keep model and serial on the Chassis only (sushy-tools among them).
            chassis = None if doc.get("Model") and doc.get("SerialNumber") else self._first(system, "chassis")
            manager = self._first(system, "managers")
            memory = (doc.get("MemorySummary") or {}).get("TotalSystemMemoryGiB")
            return BmcInventory(
                manufacturer=doc.get("Manufacturer") or getattr(chassis, "manufacturer", None),
                model=doc.get("Model") or getattr(chassis, "model", None),
                serial=doc.get("SerialNumber") or getattr(chassis, "serial_number", None),
                uuid=doc.get("UUID"),
                bios_version=doc.get("BiosVersion"),
                bmc_version=getattr(manager, "firmware_version", None),
                processor_count=(doc.get("ProcessorSummary") or {}).get("Count"),
                memory_gib=float(memory) if memory is not None else None,
                health=(doc.get("Status") or {}).get("Health"),
                firmware=self._firmware(system, manager),
                power_state=_POWER_STATES.get(system.power_state, PowerState.UNKNOWN),
            )

    def firmware_inventory(self) -> dict[str, str]:
        with self._speaking("Reading the firmware inventory"):
            system = self._system()
            return self._firmware(system, self._first(system, "managers"))

    def _firmware(self, system: Any, manager: Any) -> dict[str, str]:
        versions = self._firmware_inventory_members()
        # The system's and manager's own fields name the two components every fleet baselines.
        if system.bios_version:
            versions["bios"] = system.bios_version
        if manager is not None and manager.firmware_version:
            versions["bmc"] = manager.firmware_version
        return versions

    def _firmware_inventory_members(self) -> dict[str, str]:
        try:
            collection = self._service_root().get_update_service().firmware_inventory
            members = collection.get_members()
        except (sushy_exc.ResourceNotFoundError, sushy_exc.MissingAttributeError):
            # Optional in Redfish; sushy-tools links a FirmwareInventory but serves 404 for it.
            return {}
        return {member.identity.lower(): member.version for member in members if member.version}

    def update_firmware(self, image_uri: str, targets: list[str] | None = None) -> None:
        with self._speaking(f"Firmware update from {image_uri}"):
            service = self._service_root().get_update_service()
            if not targets:
                system = self._system()
                targets = [system.json.get("@odata.id") or system.path]
            protocol = "HTTPS" if image_uri.lower().startswith("https:") else "HTTP"
            with contextlib.suppress(sushy_exc.MissingHeaderError):  # accepted, but the BMC gave no task to follow
                service.simple_update(image_uri, targets=targets, transfer_protocol=protocol)

    def event_log(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._speaking("Reading the event log"):
            system = self._system()
            manager = self._first(system, "managers")
            entries: list[dict[str, Any]] = []
            for holder in (system.json, manager.json if manager is not None else {}):
                link = (holder.get("LogServices") or {}).get("@odata.id")
                if link:
                    entries.extend(self._log_entries(link, limit))
            entries.sort(key=lambda entry: entry.get("created") or "")
            return entries[-limit:] if limit > 0 else []

    def _log_entries(self, services_path: str, limit: int) -> list[dict[str, Any]]:
        """Entries of every LogService under a LogServices collection, at most ``limit`` from each."""
        found = []
        for service_ref in self._get_json(services_path).get("Members", []):
            service = self._get_json(service_ref["@odata.id"])
            entries_link = (service.get("Entries") or {}).get("@odata.id")
            if not entries_link:
                continue
            members = self._get_json(entries_link).get("Members", [])[-limit:] if limit > 0 else []
            for member in members:
                # Collections usually carry links only; some BMCs expand the entries inline.
                entry = member if "Message" in member else self._get_json(member["@odata.id"])
                found.append(
                    {
                        "id": entry.get("Id"),
                        "created": entry.get("Created"),
                        "severity": entry.get("Severity"),
                        "message": entry.get("Message"),
                        "message_id": entry.get("MessageId"),
                        "log": service.get("Id"),
                    }
                )
        return found
