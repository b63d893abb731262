"""What every BMC driver offers, and the errors it raises.

Drivers are thin and stateless between calls: one method, one (or a few) requests,
library errors translated into ``BmcError`` subclasses whose messages say what was
tried, where, and what the BMC answered, and never carry the password. Retries,
waiting for power states and recording the outcome on the endpoint live in
``bmc.client``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class PowerState(StrEnum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


class PowerAction(StrEnum):
    ON = "on"
    FORCE_OFF = "force_off"
    GRACEFUL_SHUTDOWN = "graceful_shutdown"
    FORCE_RESTART = "force_restart"
    GRACEFUL_RESTART = "graceful_restart"
    POWER_CYCLE = "power_cycle"


# The state a node settles in once an action is done (restarts and cycles end powered on).
EXPECTED_POWER_STATE: dict[PowerAction, PowerState] = {
    PowerAction.ON: PowerState.ON,
    PowerAction.FORCE_OFF: PowerState.OFF,
    PowerAction.GRACEFUL_SHUTDOWN: PowerState.OFF,
    PowerAction.FORCE_RESTART: PowerState.ON,
    PowerAction.GRACEFUL_RESTART: PowerState.ON,
    PowerAction.POWER_CYCLE: PowerState.ON,
}

BOOT_TARGETS = ("pxe", "disk", "cd", "bios")


@dataclass(frozen=True)
class BmcInventory:
    """What a BMC says about its server; None where the BMC does not say."""

    manufacturer: str | None
    model: str | None
    serial: str | None
    uuid: str | None
    bios_version: str | None
    bmc_version: str | None
    processor_count: int | None
    memory_gib: float | None
    health: str | None
    firmware: dict[str, str]  # component -> version, e.g. {"bios": "1.2.0", "bmc": "5.10"}
    power_state: PowerState


class BmcError(Exception):
    """A BMC call failed. The message names the operation, the BMC and its answer.

    ``retryable`` marks transient failures (network, 5xx) that ``bmc.client`` retries;
    ``attempts`` is how many tries were made before giving up (set by the client).
    """

    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable
        self.attempts = 1


class BmcAuthError(BmcError):
    """The BMC refused the credentials (or the user lacks the privilege)."""


class BmcUnreachable(BmcError):
    """No answer from the BMC: refused, reset, DNS, TLS or network failure."""

    retryable = True


class BmcTimeout(BmcError):
    """The BMC did not answer in time, or a power state did not arrive in time."""


class BmcUnsupported(BmcError):
    """The BMC (or the protocol) does not offer this operation."""


class BmcDriver(ABC):
    """One BMC, reached over one protocol. Every method may raise a ``BmcError``."""

    @property
    def where(self) -> str:
        """The BMC as messages name it, e.g. "Redfish BMC https://10.0.0.5"."""
        return repr(self)

    @abstractmethod
    def power_state(self) -> PowerState:
        """The power state the BMC reports now."""

    @abstractmethod
    def power(self, action: PowerAction) -> None:
        """Request a power action; returns once the BMC accepted it (not once it is done)."""

    @abstractmethod
    def set_boot_once(self, target: str) -> None:
        """Boot from ``target`` ("pxe", "disk", "cd", "bios") on the next boot only."""

    @abstractmethod
    def inventory(self) -> BmcInventory:
        """Manufacturer, model, serial, firmware, CPU and memory totals, health and power."""

    @abstractmethod
    def firmware_inventory(self) -> dict[str, str]:
        """Firmware versions by component; ``bios`` and ``bmc`` where the BMC offers them."""

    @abstractmethod
    def update_firmware(self, image_uri: str, targets: list[str] | None = None) -> None:
        """Ask the BMC to fetch and apply ``image_uri`` (Redfish SimpleUpdate)."""

    @abstractmethod
    def event_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of the BMC's event log, oldest first; [] where none is offered."""


def check_boot_target(target: str, where: str) -> str:
    """The target, lower-cased, or BmcUnsupported naming the ones there are."""
    target = target.lower()
    if target not in BOOT_TARGETS:
        raise BmcUnsupported(f"Boot target {target!r} at {where} is not one of {', '.join(BOOT_TARGETS)}.")
    return target
