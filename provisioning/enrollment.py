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

The acting user needs the ``nodes.operate_node`` permission (system actors always may).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant
from nodes.choices import EventKind, NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor, clean_reason, record_event
from nodewarden.errors import ReasonRequired, TransitionForbidden

DRIVERS = ("redfish", "ipmi")
REQUIRED = ("hostname", "serial", "bmc_address", "bmc_username", "hardware_profile", "site")
# The request's names for the BmcEndpoint fields it fills in (the model validates them).
ENDPOINT_FIELDS = {
    "driver": "bmc_driver",
    "address": "bmc_address",
    "system_id": "bmc_system_id",
    "username": "bmc_username",
    "password": "bmc_password",
}


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


def _check_text(req: EnrollmentRequest) -> dict[str, list[str]]:
    """Required fields, and no NUL character anywhere (PostgreSQL text cannot store one, and
    psycopg refuses it even in a lookup: a 500, not a 400, if it got that far)."""
    errors: dict[str, list[str]] = {}
    for f in fields(req):
        value = getattr(req, f.name)
        if f.name in REQUIRED and not str(value or "").strip():
            errors[f.name] = ["This field is required."]
        elif isinstance(value, str) and "\x00" in value:
            errors[f.name] = ["May not contain a NUL character."]
    return errors


def _check_models(req: EnrollmentRequest, errors: dict[str, list[str]]) -> None:
    """The node's and the endpoint's own field rules (lengths, no credentials in the BMC address),
    for fields not refused already: the import command and the admin reach here unchecked."""
    node = Node(hostname=req.hostname, serial=req.serial, bmc_address=_bmc_host(req))
    checks = [
        (node, {"hostname": "hostname", "serial": "serial", "bmc_address": "bmc_address"}),
        (_endpoint(req), ENDPOINT_FIELDS),
    ]
    for instance, names in checks:
        exclude = [f.name for f in instance._meta.fields if f.name not in names]
        try:
            instance.clean_fields(exclude=exclude)
        except ValidationError as exc:
            for model_name, messages in exc.message_dict.items():
                if names[model_name] not in errors:
                    errors[names[model_name]] = list(messages)


def _resolve(req: EnrollmentRequest) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The model instances the request names, and an error per name that does not resolve."""
    errors = _check_text(req)
    found: dict[str, Any] = {}

    def need(name: str, value: str, lookup: Any, what: str, where: str = "") -> None:
        if not value or name in errors:
            return
        obj = lookup(value)
        if obj is None:
            errors.setdefault(name, []).append(f"No {what} {value!r}{where}.")
        found[name] = obj

    if req.bmc_driver not in DRIVERS:
        errors["bmc_driver"] = [f"One of {', '.join(DRIVERS)}."]
    _check_models(req, errors)
    need(
        "hardware_profile",
        req.hardware_profile,
        lambda v: HardwareProfile.objects.filter(name=v).first(),
        "hardware profile",
    )
    need("site", req.site, lambda v: Site.objects.filter(slug=v).first(), "site")
    need("cluster", req.cluster, lambda v: Cluster.objects.filter(name=v).first(), "cluster")
    need("tenant", req.tenant, lambda v: Tenant.objects.filter(slug=v).first(), "tenant")
    need("persona", req.persona, lambda v: Persona.objects.filter(name=v).first(), "persona")
    site = found.get("site")
    if site is not None:  # rack names are per site: without one, there is nothing to look in
        need(
            "rack", req.rack, lambda v: Rack.objects.filter(site=site, name=v).first(), "rack", f" in site {req.site!r}"
        )
    cluster = found.get("cluster")
    if cluster is not None and site is not None and cluster.site_id != site.pk:
        errors.setdefault("cluster", []).append(
            f"Cluster {cluster.name!r} is in site {cluster.site.slug!r}, not {site.slug!r}."
        )
    return found, errors


def _duplicates(req: EnrollmentRequest) -> dict[str, list[str]]:
    """An error per field whose value is already in the fleet (hostnames compare as DNS does)."""
    from bmc.models import BmcEndpoint

    def first(queryset: Any, *values: str) -> Any:
        # No stored value holds a NUL, and PostgreSQL refuses one even in a lookup (_resolve names it).
        return None if any("\x00" in v for v in values) else queryset.first()

    endpoint = first(
        BmcEndpoint.objects.filter(address=req.bmc_address, system_id=req.bmc_system_id).select_related("node"),
        req.bmc_address,
        req.bmc_system_id,
    )
    bmc = f"BMC {req.bmc_address}" + (f" system {req.bmc_system_id}" if req.bmc_system_id else "")
    errors: dict[str, list[str]] = {}
    for name, what, taken in (
        ("serial", repr(req.serial), first(Node.objects.filter(serial=req.serial), req.serial)),
        ("hostname", repr(req.hostname), first(Node.objects.filter(hostname__iexact=req.hostname), req.hostname)),
        ("bmc_address", bmc, endpoint.node if endpoint is not None else None),
    ):
        if taken is not None:
            errors[name] = [f"{what} is already enrolled as {taken.hostname} ({taken.get_state_display()})."]
    return errors


def _endpoint(req: EnrollmentRequest) -> Any:
    from bmc.models import BmcEndpoint

    return BmcEndpoint(
        driver=req.bmc_driver,
        address=req.bmc_address,
        system_id=req.bmc_system_id,
        username=req.bmc_username,
        password=req.bmc_password,
        verify_tls=req.bmc_verify_tls,
    )


def _bmc_host(req: EnrollmentRequest) -> str:
    """The node's ``bmc_address``: the endpoint's host[:port], without scheme or path."""
    return req.bmc_address.split("://", 1)[-1].split("/", 1)[0]


def read_bmc(req: EnrollmentRequest) -> Any:
    """The BMC's inventory, or EnrollmentError naming what went wrong (never the password)."""
    from bmc import client
    from bmc.drivers.base import BmcError

    try:
        return client.read_inventory(_endpoint(req))
    except BmcError as exc:
        raise EnrollmentError({"bmc_address": [f"The BMC could not be read: {exc}"]}) from exc


def enroll(req: EnrollmentRequest, *, actor: Actor, reason: str = "Enrolled", start: bool = True) -> Node:
    """Enroll one node (see the module docstring).

    Raises EnrollmentError (bad input, BMC unreadable), EnrollmentConflict (already in the
    fleet, or enrolled concurrently) or TransitionForbidden (the user may not operate nodes).
    """
    if actor.user is not None and not actor.user.has_perm(OPERATE):
        raise TransitionForbidden(f"{actor.name} may not enroll nodes.")
    try:
        reason = clean_reason(reason)
    except ReasonRequired as exc:
        raise EnrollmentError({"reason": [str(exc)]}) from exc
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
    try:
        with transaction.atomic():
            node = Node.objects.create(
                hostname=req.hostname,
                serial=req.serial,
                bmc_address=_bmc_host(req),
                site=found["site"],
                cluster=found.get("cluster"),
                rack=found.get("rack"),
                tenant=found.get("tenant"),
                hardware_profile=found["hardware_profile"],
                persona=found.get("persona"),
                state=NodeState.ENROLLED,
            )
            endpoint = _endpoint(req)
            endpoint.node = node
            endpoint.save()
            record_event(
                node.pk,
                EventKind.ACTION,
                actor=actor,
                reason=reason,
                details={"enrolled": req.redacted(), "bmc_inventory": facts},
            )
            if start:
                # robust: the node is enrolled whatever happens next; a Day 0 that cannot start is
                # logged and the node stays Enrolled (provision it again), not a failed enrollment.
                transaction.on_commit(lambda: start_day0(node.pk, actor=actor), robust=True)
    except IntegrityError as exc:
        # A concurrent enrollment of the same serial or hostname won the race since _duplicates():
        # the atomic block rolled back node, endpoint and history row together.
        raise EnrollmentConflict(
            _duplicates(req) or {"serial": [f"{req.serial!r} or {req.hostname!r} was enrolled meanwhile."]}
        ) from exc
    return node


def start_day0(node_id: int, *, actor: Actor) -> None:
    """Boot config and join token, and Enrolled -> Initializing (whose follow-up PXE-boots the node)."""
    from .services import prepare_boot

    prepare_boot(node_id, actor=actor, reason="Enrolled: preparing boot, network and cloud-init")
