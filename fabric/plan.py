"""Cabling plan import: every bad row reported by line number, and nothing stored from a bad file.

CSV columns (header row required): ``a_device, a_port, b_device, b_port`` and optionally
``width`` ("4X") and ``rate_gbps`` (400). Devices are named as the fabric names them:
a switch by its node description ("leaf-r3-02"), an HCA as "<host> <device>"
("gpu-node-0001 mlx5_3"). A good file becomes the plan in force, as a new version.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from nodes.models import Node
from nodes.services import Actor

from .choices import DeviceKind, DeviceRole
from .models import CablingPlan, FabricDevice, PlannedLink
from .validation import WIDTH_LANES, PlanLink, Port

REQUIRED = ("a_device", "a_port", "b_device", "b_port")
OPTIONAL = ("width", "rate_gbps")
MAX_ERRORS = 200


class PlanImportError(ValueError):
    """The file is refused; ``errors`` lists (line, message), every one found up to MAX_ERRORS."""

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        self.errors = errors
        shown = "; ".join(f"line {line}: {message}" for line, message in errors[:20])
        more = f" (and {len(errors) - 20} more)" if len(errors) > 20 else ""
        super().__init__(f"{len(errors)} problem(s), nothing imported: {shown}{more}")


@dataclass(frozen=True)
class PlanRow:
    line: int
    link: PlanLink


def read_csv(text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) pairs; the header is line 1."""
    if "\x00" in text:
        raise PlanImportError([(1, "the file holds a NUL character")])
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    rows = []
    line = 1
    try:
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise PlanImportError(
                [
                    (
                        1,
                        (
                            f"missing column(s) {', '.join(missing)}; the header must name "
                            f"{', '.join(REQUIRED)} (and optionally {', '.join(OPTIONAL)})"
                        ),
                    )
                ]
            )
        line = 2
        for row in reader:
            rows.append((line, row))
            line = reader.line_num + 1
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit(): the file is not a plan
        raise PlanImportError([(line, f"unreadable CSV: {exc}")]) from None
    return rows


def _port(value: Any) -> int:
    port = int(str(value).strip())
    if not 1 <= port <= 255:
        raise ValueError
    return port


def parse_rows(rows: Iterable[tuple[int, Mapping[str, Any]]]) -> list[PlanRow]:
    """The plan links, or PlanImportError with every problem and its line."""
    errors: list[tuple[int, str]] = []
    good: list[PlanRow] = []
    used: dict[Port, int] = {}
    for line, row in rows:
        extra = [k for k in row if k not in REQUIRED + OPTIONAL]
        problems = [f"unknown column(s) {', '.join(map(str, extra))}"] if extra and None not in extra else []
        if None in row:
            problems.append("more values than columns")
        a_name, b_name = (str(row.get("a_device") or "").strip(), str(row.get("b_device") or "").strip())
        for name, value in (("a_device", a_name), ("b_device", b_name)):
            if not value:
                problems.append(f"{name} is empty")
            elif len(value) > 200:
                problems.append(f"{name} is longer than 200 characters")
        ports = []
        for name in ("a_port", "b_port"):
            try:
                ports.append(_port(row.get(name)))
            except (TypeError, ValueError):
                problems.append(f"{name} must be a port number from 1 to 255, not {row.get(name)!r}")
        width = str(row.get("width") or "").strip().upper()
        if width and width not in WIDTH_LANES:
            problems.append(f"width must be one of {', '.join(WIDTH_LANES)}, not {row.get('width')!r}")
        rate = None
        if str(row.get("rate_gbps") or "").strip():
            try:
                rate = float(row["rate_gbps"])
                if not 0 < rate < 100_000:
                    raise ValueError
            except ValueError:
                problems.append(f"rate_gbps must be a positive number, not {row['rate_gbps']!r}")
        if not problems:
            a, b = Port(a_name, ports[0]), Port(b_name, ports[1])
            if a == b:
                problems.append(f"{a} is cabled to itself")
            for end in (a, b):
                if end in used:
                    problems.append(f"{end} is already cabled on line {used[end]}")
            if not problems:
                used[a] = used[b] = line
                good.append(PlanRow(line, PlanLink(a, b, width, rate)))
        errors += [(line, p) for p in problems]
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise PlanImportError(errors)
    if not good:
        raise PlanImportError([(1, "the plan lists no cable")])
    return good


def _role(name: str, linked_to_host: bool) -> tuple[str, str]:
    if " " in name:  # "<host> <hca>": how ibnetdiscover names a channel adapter
        return DeviceKind.CA, DeviceRole.HOST
    return DeviceKind.SWITCH, DeviceRole.LEAF if linked_to_host else DeviceRole.SPINE


def ensure_devices(
    names: Iterable[str], *, hosts_by_switch: set[str] | None = None, in_plan: bool = False
) -> dict[str, FabricDevice]:
    """The devices by name, created where missing (HCAs tied to their node by host name)."""
    names = set(names)
    found = {d.name: d for d in FabricDevice.objects.filter(name__in=names)}
    _tie_to_nodes([d for d in found.values() if d.kind == DeviceKind.CA and d.node_id is None])
    missing = sorted(names - set(found))
    if missing:
        hostnames = {n.split(" ", 1)[0] for n in missing if " " in n}
        nodes = dict(Node.objects.filter(hostname__in=hostnames).values_list("hostname", "pk"))
        created = []
        for name in missing:
            kind, role = _role(name, name in (hosts_by_switch or set()))
            created.append(
                FabricDevice(
                    name=name,
                    kind=kind,
                    role=role,
                    in_plan=in_plan,
                    node_id=nodes.get(name.split(" ", 1)[0]) if kind == DeviceKind.CA else None,
                )
            )
        FabricDevice.objects.bulk_create(created, batch_size=2000)
        found.update({d.name: d for d in FabricDevice.objects.filter(name__in=missing)})
    return found


def leaf_switches(links: Iterable[PlanLink]) -> set[str]:
    """Switches cabled to at least as many HCAs as switches: leaves. A spine that also carries
    a management host (the subnet manager's HCA) stays a spine."""
    to_hosts: Counter[str] = Counter()
    to_switches: Counter[str] = Counter()
    for link in links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            if " " not in end.device:
                (to_hosts if " " in other.device else to_switches)[end.device] += 1
    return {name for name, hosts in to_hosts.items() if hosts >= to_switches[name]}


def _tie_to_nodes(devices: list[FabricDevice]) -> None:
    """HCAs planned or seen before their node was enrolled: tie them to it now (by host name)."""
    if not devices:
        return
    nodes = dict(
        Node.objects.filter(hostname__in={d.name.split(" ", 1)[0] for d in devices}).values_list("hostname", "pk")
    )
    tied = [d for d in devices if nodes.get(d.name.split(" ", 1)[0])]
    for device in tied:
        device.node_id = nodes[device.name.split(" ", 1)[0]]
    FabricDevice.objects.bulk_update(tied, ["node"], batch_size=2000)


def import_plan(text: str, *, actor: Actor, source: str = "", note: str = "") -> CablingPlan:
    """Check every row, then store the plan as the one in force (one transaction)."""
    rows = parse_rows(read_csv(text))
    links = [r.link for r in rows]
    leaves = leaf_switches(links)
    with transaction.atomic():
        devices = ensure_devices(
            {p.device for link in links for p in (link.a, link.b)}, hosts_by_switch=leaves, in_plan=True
        )
        FabricDevice.objects.exclude(name__in=devices).filter(in_plan=True).update(in_plan=False)
        FabricDevice.objects.filter(name__in=devices).update(in_plan=True)
        switches = {p.device for link in links for p in (link.a, link.b) if " " not in p.device}
        # Roles follow the plan: a switch discovered before it was planned may have been guessed wrong.
        FabricDevice.objects.filter(name__in=leaves).exclude(role=DeviceRole.LEAF).update(role=DeviceRole.LEAF)
        FabricDevice.objects.filter(name__in=switches - leaves).exclude(role=DeviceRole.SPINE).update(
            role=DeviceRole.SPINE
        )
        plan = CablingPlan.objects.create(actor_name=actor.name, source=source[:300], links=len(links), note=note)
        PlannedLink.objects.bulk_create(
            [
                PlannedLink(
                    plan=plan,
                    a_device=devices[link.a.device],
                    a_port=link.a.port,
                    b_device=devices[link.b.device],
                    b_port=link.b.port,
                    width=link.width,
                    rate_gbps=link.rate_gbps,
                )
                for link in links
            ],
            batch_size=2000,
        )
    return plan


def current_plan() -> tuple[CablingPlan | None, list[PlanLink]]:
    """The plan in force and its links, read in one query."""
    plan = CablingPlan.objects.first()
    if plan is None:
        return None, []
    rows = PlannedLink.objects.filter(plan=plan).values_list(
        "a_device__name", "a_port", "b_device__name", "b_port", "width", "rate_gbps"
    )
    return plan, [PlanLink(Port(a, ap), Port(b, bp), w, r) for a, ap, b, bp, w, r in rows.iterator(chunk_size=5000)]
