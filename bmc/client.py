"""The one road to a node's BMC: every other app calls these functions.

Each call builds a driver for the endpoint, retries transient failures (no answer,
5xx) with exponential backoff but never refusals (4xx, bad credentials), and
records the outcome on the endpoint: ``last_contact_at`` on success, ``last_error``
(a message that never carries the password) on failure, after which the
``BmcError`` is raised to the caller. The recording is a queryset ``update()`` so
it cannot overwrite an operator's concurrent edit of the same endpoint.

Timings come from settings (``NODEWARDEN_BMC_*``), read at call time so tests can
override them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.conf import settings
from django.utils import timezone

from .choices import BmcDriverKind
from .drivers.base import (
    EXPECTED_POWER_STATE,
    BmcDriver,
    BmcError,
    BmcInventory,
    BmcTimeout,
    BmcUnsupported,
    PowerAction,
    PowerState,
)
from .drivers.ipmi import IpmiDriver
from .drivers.redfish import RedfishDriver
from .models import BmcEndpoint

logger = logging.getLogger(__name__)
T = TypeVar("T")


def driver_for(endpoint: BmcEndpoint, *, timeout: float | None = None) -> BmcDriver:
    """A driver for the endpoint's protocol; ``timeout`` is per request (default NODEWARDEN_BMC_TIMEOUT)."""
    timeout = settings.NODEWARDEN_BMC_TIMEOUT if timeout is None else timeout
    if endpoint.driver == BmcDriverKind.IPMI:
        return IpmiDriver(endpoint.address, username=endpoint.username, password=endpoint.password, timeout=timeout)
    return RedfishDriver(
        endpoint.address,
        username=endpoint.username,
        password=endpoint.password,
        system_id=endpoint.system_id,
        verify_tls=endpoint.verify_tls,
        timeout=timeout,
    )


# --- Service helpers ------------------------------------------------------------
def read_inventory(endpoint: BmcEndpoint) -> BmcInventory:
    """What the BMC says about its server (model, serial, firmware, CPU/memory totals, power)."""
    driver = driver_for(endpoint)
    with _recorded(endpoint):
        return _retrying(driver.inventory)


def firmware_inventory(endpoint: BmcEndpoint) -> dict[str, str]:
    """Firmware versions by component, e.g. ``{"bios": "1.2.0", "bmc": "5.10"}``."""
    driver = driver_for(endpoint)
    with _recorded(endpoint):
        return _retrying(driver.firmware_inventory)


def set_boot_once(endpoint: BmcEndpoint, target: str) -> None:
    """Boot from ``target`` ("pxe", "disk", "cd", "bios") on the next boot only."""
    driver = driver_for(endpoint)
    with _recorded(endpoint):
        _retrying(lambda: driver.set_boot_once(target))
    logger.info("bmc: node %s boots once from %s (%s)", endpoint.node_id, target, endpoint)


def update_firmware(endpoint: BmcEndpoint, image_uri: str, targets: list[str] | None = None) -> None:
    """Hand the BMC a firmware image to apply (Redfish SimpleUpdate); None targets = this system.

    Returns once the BMC accepted it; most firmware applies on the next restart.
    """
    driver = driver_for(endpoint)
    with _recorded(endpoint):
        _retrying(lambda: driver.update_firmware(image_uri, targets))
    logger.info("bmc: node %s firmware update from %s accepted (%s)", endpoint.node_id, image_uri, endpoint)


def event_log(endpoint: BmcEndpoint, limit: int = 100) -> list[dict[str, object]]:
    """The newest ``limit`` entries of the BMC's event log (SEL or Redfish LogServices)."""
    driver = driver_for(endpoint)
    with _recorded(endpoint):
        return _retrying(lambda: driver.event_log(limit))


def read_power_state(endpoint: BmcEndpoint, *, timeout: float | None = None, retry: bool = True) -> PowerState:
    """The power state the BMC reports now. ``timeout`` is per request; without ``retry`` one try
    only (the fleet auditor reads many BMCs in a bounded time: a BMC that does not answer at once
    is "unknown" this run and asked again on the next)."""
    driver = driver_for(endpoint, timeout=timeout)
    with _recorded(endpoint):
        return _noted(endpoint, _retrying(driver.power_state) if retry else driver.power_state())


def power(
    endpoint: BmcEndpoint, action: PowerAction | str, *, wait: bool = True, timeout: float | None = None
) -> PowerState:
    """Perform a power action; with ``wait``, return once the BMC reports the state it leads to.

    On for ON, restarts and cycles (restarts may pass through off: we wait for on
    after the request); off for FORCE_OFF and GRACEFUL_SHUTDOWN. BmcTimeout, naming
    the state last seen, if that state has not arrived within ``timeout`` seconds
    (default NODEWARDEN_BMC_POWER_TIMEOUT). Without ``wait``, the state right after
    the request.
    """
    action = PowerAction(action)
    timeout = settings.NODEWARDEN_BMC_POWER_TIMEOUT if timeout is None else timeout
    driver = driver_for(endpoint)
    logger.info("bmc: node %s power %s (%s)", endpoint.node_id, action, endpoint)
    with _recorded(endpoint):
        _request_power(driver, action, timeout)
        if not wait:
            return _noted(endpoint, _retrying(driver.power_state))
        return _noted(endpoint, _wait_for_power(driver, action, EXPECTED_POWER_STATE[action], timeout))


# --- Internals ------------------------------------------------------------------
def _request_power(driver: BmcDriver, action: PowerAction, timeout: float) -> None:
    try:
        _retrying(lambda: driver.power(action))
    except BmcUnsupported:
        if action is not PowerAction.POWER_CYCLE:
            raise
        # Many Redfish services (sushy-tools among them) offer no PowerCycle: off, wait, on.
        _retrying(lambda: driver.power(PowerAction.FORCE_OFF))
        _wait_for_power(driver, action, PowerState.OFF, timeout)
        _retrying(lambda: driver.power(PowerAction.ON))


def _wait_for_power(driver: BmcDriver, action: PowerAction, expected: PowerState, timeout: float) -> PowerState:
    """Poll every NODEWARDEN_BMC_POLL_INTERVAL until ``expected``; BmcTimeout with the last state seen."""
    interval = settings.NODEWARDEN_BMC_POLL_INTERVAL
    deadline = time.monotonic() + timeout
    while True:
        seen = _retrying(driver.power_state)
        if seen == expected:
            return seen
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BmcTimeout(
                f"Power action {action} at {driver.where}: the BMC still reports power {seen} "
                f"after {timeout:g} s of waiting for {expected}."
            )
        time.sleep(min(interval, remaining))


def _retrying(call: Callable[[], T]) -> T:
    """``call()``, tried again after transient failures: NODEWARDEN_BMC_RETRIES more times at most,
    waiting NODEWARDEN_BMC_RETRY_BACKOFF_MS, then twice that, and so on."""
    retries = settings.NODEWARDEN_BMC_RETRIES
    backoff = settings.NODEWARDEN_BMC_RETRY_BACKOFF_MS / 1000
    attempt = 1
    while True:
        try:
            return call()
        except BmcError as exc:
            exc.attempts = attempt
            if not exc.retryable or attempt > retries:
                raise
            delay = backoff * 2 ** (attempt - 1)
            logger.warning("bmc: try %d of %d failed, again in %.2f s: %s", attempt, retries + 1, delay, exc)
            time.sleep(delay)
            attempt += 1


def _noted(endpoint: BmcEndpoint, state: PowerState) -> PowerState:
    """Keep the power state just read on the endpoint: the node page shows it without a live call."""
    endpoint.last_power_state, endpoint.last_power_state_at = state.value, timezone.now()
    BmcEndpoint.objects.filter(pk=endpoint.pk).update(
        last_power_state=endpoint.last_power_state, last_power_state_at=endpoint.last_power_state_at
    )
    return state


@contextmanager
def _recorded(endpoint: BmcEndpoint) -> Iterator[None]:
    """Record success (last contact) or failure (last error) on the endpoint, row and instance alike."""
    try:
        yield
    except BmcError as exc:
        # last_updated is left alone: it dates changes to the configuration, not contacts.
        endpoint.last_error = str(exc)
        BmcEndpoint.objects.filter(pk=endpoint.pk).update(last_error=endpoint.last_error)
        logger.warning("bmc: node %s: %s", endpoint.node_id, exc)
        raise
    endpoint.last_contact_at, endpoint.last_error = timezone.now(), ""
    BmcEndpoint.objects.filter(pk=endpoint.pk).update(last_contact_at=endpoint.last_contact_at, last_error="")
