"""Enrollment: the one road by which a new node enters the fleet (API, import command, admin).

A node is enrolled by its BMC address and credentials and its serial. Before anything is
written, every reference is resolved (site, cluster, rack, hardware profile, tenant,
persona), duplicates are refused, and the BMC is asked for its inventory: an unreachable
BMC or wrong credentials refuse the enrollment. A BMC that reports another serial than
the one given is recorded on the enrollment, not refused: Redfish BMCs of multi-node
enclosures report the chassis's serial (and sushy-tools reports one for all). Then, in one transaction, the node
(state Enrolled), its BMC endpoint (password encrypted) and the history row with the
BMC's facts. Nothing half-made is ever left behind.

With ``start=True`` (the default) Day 0 continues at once: the boot config and join
token are prepared and the node moves to Initializing, whose follow-up boots it from
the network through the BMC.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant
from nodes.choices import EventKind, NodeState
from nodes.models import Node
from nodes.services import Actor, clean_reason, record_event

DRIVERS = ("redfish", "ipmi")


class EnrollmentError(ValueError):
    """Bad input or a BMC that cannot be read: nothing was written. ``errors`` maps field -> messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


class EnrollmentConflict(EnrollmentError):
    """The serial, hostname or BMC address is already in the fleet (the API answers 409)."""


@dataclass
class EnrollmentRequest:
    """What an operator (or an import file row) gives for one node."""

    hostname: str
    serial: str
    bmc_address: str
    bmc_username: str
    bmc_password: str = field(repr=False)
    hardware_profile: str  # HardwareProfile.name
    site: str  # Site.slug
    bmc_driver: str = "redfish"
    bmc_system_id: str = ""
    bmc_verify_tls: bool = True
    cluster: str = ""  # Cluster.name
    rack: str = ""  # Rack.name within the site
    tenant: str = ""  # Tenant.slug
    persona: str = ""  # Persona.name

    def redacted(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("bmc_password")
        return data


def _resolve(req: EnrollmentRequest) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The model instances the request names, and an error per name that does not resolve."""
    errors: dict[str, list[str]] = {}
    found: dict[str, Any] = {}

    def need(name: str, value: str, lookup: Any, what: str) -> None:
        if not value:
            return
        obj = lookup(value)
        if obj is None:
            errors.setdefault(name, []).append(f"No {what} {value!r}.")
        found[name] = obj

    for name in ("hostname", "serial", "bmc_address", "bmc_username", "hardware_profile", "site"):
        if not str(getattr(req, name) or "").strip():
            errors.setdefault(name, []).append("This field is required.")
    if req.bmc_driver not in DRIVERS:
        errors.setdefault("bmc_driver", []).append(f"One of {', '.join(DRIVERS)}.")
    need("hardware_profile", req.hardware_profile, lambda v: HardwareProfile.objects.filter(name=v).first(),
         "hardware profile")
    need("site", req.site, lambda v: Site.objects.filter(slug=v).first(), "site")
    need("cluster", req.cluster, lambda v: Cluster.objects.filter(name=v).first(), "cluster")
    need("tenant", req.tenant, lambda v: Tenant.objects.filter(slug=v).first(), "tenant")
    need("persona", req.persona, lambda v: Persona.objects.filter(name=v).first(), "persona")
    site = found.get("site")
    need("rack", req.rack, lambda v: Rack.objects.filter(site=site, name=v).first() if site else None,
         f"rack in site {req.site!r}")
    cluster = found.get("cluster")
    if cluster is not None and site is not None and cluster.site_id != site.pk:
        errors.setdefault("cluster", []).append(f"Cluster {cluster.name!r} is in site {cluster.site.slug!r}, "
                                                f"not {site.slug!r}.")
    return found, errors


def _duplicates(req: EnrollmentRequest) -> dict[str, list[str]]:
    from bmc.models import BmcEndpoint

    errors: dict[str, list[str]] = {}
    for name, taken in (("serial", Node.objects.filter(serial=req.serial).first()),
                        ("hostname", Node.objects.filter(hostname=req.hostname).first()),
                        ("bmc_address", getattr(BmcEndpoint.objects.filter(address=req.bmc_address, system_id=req.bmc_system_id)
                                                .select_related("node").first(), "node", None))):
        if taken is not None:
            errors[name] = [f"{getattr(req, name)!r} is already enrolled as {taken.hostname} ({taken.get_state_display()})."]
    return errors


def _endpoint(req: EnrollmentRequest) -> Any:
    from bmc.models import BmcEndpoint

    return BmcEndpoint(driver=req.bmc_driver, address=req.bmc_address, system_id=req.bmc_system_id,
                       username=req.bmc_username, password=req.bmc_password, verify_tls=req.bmc_verify_tls)


def read_bmc(req: EnrollmentRequest) -> Any:
    """The BMC's inventory, or EnrollmentError naming what went wrong (never the password)."""
    from bmc import client
    from bmc.drivers.base import BmcError

    try:
        return client.read_inventory(_endpoint(req))
    except BmcError as exc:
        raise EnrollmentError({"bmc_address": [f"The BMC could not be read: {exc}"]}) from exc


def enroll(req: EnrollmentRequest, *, actor: Actor, reason: str = "Enrolled", start: bool = True) -> Node:
    """Enroll one node (see the module docstring). Raises EnrollmentError / EnrollmentConflict."""
    reason = clean_reason(reason)
    found, errors = _resolve(req)
    if errors:
        raise EnrollmentError(errors)
    duplicates = _duplicates(req)
    if duplicates:
        raise EnrollmentConflict(duplicates)
    inventory = read_bmc(req)
    facts = {k: v for k, v in asdict(inventory).items() if v not in (None, {}, "")}
    if inventory.serial and inventory.serial.strip().lower() != req.serial.strip().lower():
        reason += f" (the BMC reports serial {inventory.serial!r}, not {req.serial!r})"
    host = req.bmc_address.split("://", 1)[-1].split("/", 1)[0]
    try:
        with transaction.atomic():
            node = Node.objects.create(
                hostname=req.hostname, serial=req.serial, bmc_address=host, site=found["site"],
                cluster=found.get("cluster"), rack=found.get("rack"), tenant=found.get("tenant"),
                hardware_profile=found["hardware_profile"], persona=found.get("persona"), state=NodeState.ENROLLED)
            endpoint = _endpoint(req)
            endpoint.node = node
            endpoint.save()
            record_event(node.pk, EventKind.ACTION, actor=actor, reason=reason,
                         details={"enrolled": req.redacted(), "bmc_inventory": facts})
            if start:
                transaction.on_commit(lambda: start_day0(node.pk, actor=actor))
    except IntegrityError as exc:  # a concurrent enrollment of the same serial or hostname won the race
        raise EnrollmentConflict({"serial": [f"{req.serial!r} or {req.hostname!r} was enrolled meanwhile."]}) from exc
    return node


def start_day0(node_id: int, *, actor: Actor) -> None:
    """Boot config and join token, and Enrolled -> Initializing (whose follow-up PXE-boots the node)."""
    from .services import prepare_boot

    prepare_boot(node_id, actor=actor, reason="Enrolled: preparing boot, network and cloud-init")
