"""Realistic InfiniBand fabrics, generated: a two-level (leaf/spine) fat tree of GPU hosts,
rail-optimized by default (HCA k of every host cabled to rail k's leaves), with its
cabling plan, an ibsim topology file, and the text ``ibnetdiscover`` and ``iblinkinfo``
would print for it, in their exact formats. ``plant`` puts faults in the cabling as built
(miswired, swapped, missing, degraded cables) and returns exactly what it planted, so a
benchmark can check that every fault is found and nothing else.

ibsim runs the small ones (tests: 2 spines, 4 leaves, 8 hosts x 2 HCAs start in ~0.1 s);
the 2,000-host fabric of the benchmark exists only as text.

Conventions, the same as ibsim's so that a generated fabric and its simulation agree:
node GUIDs from fixed bases; an HCA's port GUID is its node GUID + port; a switch's
ports share its node GUID; LIDs as opensm hands them out (the SM's port first, then
``_lids``); nodes printed in reverse breadth-first order from the
first HCA (where the SM and the diags attach).
"""

from __future__ import annotations

import csv
import io
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .ibdiags import LANE_GBPS, LANES, SPEED_NAME

SWITCH_GUID_BASE = 0x0002C90300100000
CA_GUID_BASE = 0x0002C90300200000
SWITCH_DEVID, CA_DEVID, VENDID = 0xD2F0, 0x101B, 0x02C9
# libibmad's text for each per-lane rate, as iblinkinfo prints it.
SPEED_TEXT = {
    2.5: "2.5 Gbps",
    5.0: "5.0 Gbps",
    10.0: "10.0 Gbps",
    14.0625: "14.0625 Gbps",
    25.78125: "25.78125 Gbps",
    53.125: "53.125 Gbps",
    106.25: "106.25 Gbps",
    212.5: "212.5 Gbps",
}
# ibsim's enabled-width bits (PortInfo LinkWidthEnabled) and extended-speed bits.
IBSIM_WIDTH_BITS = {"1X": 1, "4X": 2, "8X": 4, "12X": 8}
IBSIM_SPEED_BITS = {"SDR": (1, 0), "DDR": (3, 0), "QDR": (7, 0), "FDR": (7, 1), "EDR": (7, 3), "HDR": (7, 7)}
PLAN_HEADER = ("a_device", "a_port", "b_device", "b_port", "width", "rate_gbps")


class Endpoint(NamedTuple):
    device: str  # node description: "leaf-r3-02", "gpu-node-0001 mlx5_3"
    port: int

    def __str__(self) -> str:
        return f"{self.device}/{self.port}"


class PlanRow(NamedTuple):
    """One planned cable: a CSV row of the cabling plan (``PLAN_HEADER``)."""

    a_device: str
    a_port: int
    b_device: str
    b_port: int
    width: str
    rate_gbps: float

    @property
    def a(self) -> Endpoint:
        return Endpoint(self.a_device, self.a_port)

    @property
    def b(self) -> Endpoint:
        return Endpoint(self.b_device, self.b_port)


@dataclass(frozen=True)
class PlantedFault:
    """One planted fault: the planned cable(s) it touches and what is cabled instead."""

    kind: str  # "miswire", "swap", "missing", "degraded"
    planned: tuple[PlanRow, ...]
    actual: tuple[tuple[Endpoint, Endpoint], ...]  # cables as built instead; () when pulled
    width: str | None = None  # degraded: as trained
    rate_gbps: float | None = None


@dataclass
class _Node:
    name: str  # node description
    kind: str  # "switch" / "ca"
    ports: int
    guid: int
    sim_id: str  # ibsim's node id: "S-leaf-r0-01", "H-gpu-node-0001-mlx5_0"

    def port_guid(self, port: int) -> int:
        return self.guid if self.kind == "switch" else self.guid + port


_Key = tuple[tuple[str, int], tuple[str, int]]


def _key(a: tuple[str, int], b: tuple[str, int]) -> _Key:
    return (a, b) if a <= b else (b, a)


@dataclass
class GeneratedFabric:
    """A generated fabric: the plan, the cabling as built (the plan plus planted faults)."""

    nodes: dict[str, _Node]  # by name, in file order: HCAs first (the first is the SM's)
    plan: list[PlanRow]
    width: str
    speed_gbps: float
    peer: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)  # as built
    trained: dict[_Key, tuple[str, float]] = field(default_factory=dict)  # degraded cables only
    faults: list[PlantedFault] = field(default_factory=list)
    planned_ports: set[tuple[str, int]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        as_planned = not self.peer  # no cabling given: built as planned
        for row in self.plan:
            a, b = (row.a_device, row.a_port), (row.b_device, row.b_port)
            self.planned_ports.update((a, b))
            if as_planned:
                self.peer[a], self.peer[b] = b, a

    # --- the plan ---------------------------------------------------------------------------

    def plan_rows(self) -> list[PlanRow]:
        """The cabling plan, one row per cable: HCA end first, then leaf to spine."""
        return list(self.plan)

    def plan_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(PLAN_HEADER)
        writer.writerows((r.a_device, r.a_port, r.b_device, r.b_port, r.width, f"{r.rate_gbps:g}") for r in self.plan)
        return out.getvalue()

    def hosts(self) -> list[str]:
        return sorted({n.name.split(" ", 1)[0] for n in self.nodes.values() if n.kind == "ca"})

    # --- the cabling as built -----------------------------------------------------------------

    def cables(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Every cable as built, once, sorted."""
        return sorted({_key(a, b) for a, b in self.peer.items()})

    def trained_as(self, a: tuple[str, int], b: tuple[str, int]) -> tuple[str, float]:
        return self.trained.get(_key(a, b), (self.width, self.speed_gbps))

    def sim_id(self, name: str) -> str:
        """ibsim's node id for a node description ("gpu-node-0001 mlx5_0" -> "H-gpu-node-0001-mlx5_0")."""
        return self.nodes[name].sim_id

    def net_file(self) -> str:
        """The fabric as built, in ibsim's topology format (ibnetdiscover's plus directives).

        A cable planted narrower trains at 1X through ibsim's per-port ``w=1``; ibsim has
        no per-port extended speed, so a cable planted slower cannot be simulated."""
        name = SPEED_NAME[self.speed_gbps]
        if self.width not in IBSIM_WIDTH_BITS or name not in IBSIM_SPEED_BITS:
            raise ValueError(f"ibsim cannot train {self.width} {name} links")
        speed_bits, ext_bits = IBSIM_SPEED_BITS[name]
        # Enabled widths: the fabric's plus 1X, so a port limited to 1X (w=1) still trains.
        out = [
            (
                f"# nodewarden fabric.topology: {len(self.hosts())} hosts, "
                f"{sum(n.kind == 'switch' for n in self.nodes.values())} switches"
            ),
            "# first node = where the SM and the diags attach (ibsim's default SIM_HOST)",
            f"width={IBSIM_WIDTH_BITS[self.width] | 1}",
            f"speed={speed_bits}",
            f"extspeed={ext_bits}",
            "",
        ]
        for node in self.nodes.values():
            out += [
                f"vendid=0x{VENDID:04x}",
                f"devid=0x{CA_DEVID if node.kind == 'ca' else SWITCH_DEVID:04x}",
                f"{'caguid' if node.kind == 'ca' else 'switchguid'}=0x{node.guid:016x}",
                f'{"Hca" if node.kind == "ca" else "Switch"}\t{node.ports} "{node.sim_id}"\t# "{node.name}"',
            ]
            for port in range(1, node.ports + 1):
                there = self.peer.get((node.name, port))
                if there is None:
                    continue
                line = f'[{port}]\t"{self.nodes[there[0]].sim_id}"[{there[1]}]'
                width, speed = self.trained_as((node.name, port), there)
                if speed != self.speed_gbps:
                    raise ValueError(
                        f"{node.name}/{port} is planted slower ({speed} Gb/s a lane): ibsim "
                        "cannot train one cable slower than the rest"
                    )
                if width != self.width:
                    if width not in IBSIM_WIDTH_BITS:
                        raise ValueError(f"ibsim cannot train a {width} link")
                    line += f"\tw={IBSIM_WIDTH_BITS[width]}"
                out.append(line)
            out.append("")
        return "\n".join(out)

    # --- what the diags would print -----------------------------------------------------------

    def _sm(self) -> _Node:
        return next(iter(self.nodes.values()))

    def _discovery_order(self) -> list[_Node]:
        """Breadth-first from the SM's HCA, ports in order: the order ibnetdisc finds nodes."""
        start = self._sm()
        seen = {start.name}
        order = [start]
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for port in range(1, node.ports + 1):
                there = self.peer.get((node.name, port))
                if there is not None and there[0] not in seen:
                    seen.add(there[0])
                    order.append(self.nodes[there[0]])
                    queue.append(self.nodes[there[0]])
        return order

    def _lids(self, reachable: list[_Node]) -> dict[str, int]:
        """opensm's LIDs: its own port first, then in the order of its port GUID table (LMC 0).
        That table is keyed by the GUID in network byte order, read as a host integer: on
        x86 it sorts by the GUID's last byte first (seen with opensm 3.3 under ibsim)."""
        sm = self._sm()
        ordered = sorted(
            (n for n in reachable if n is not sm),
            key=lambda n: int.from_bytes(n.port_guid(1).to_bytes(8, "big"), "little"),
        )
        return {n.name: lid for lid, n in enumerate([sm, *ordered], 1)}

    def ibnetdiscover_text(self) -> str:
        """What ``ibnetdiscover`` prints for the fabric as built."""
        order = self._discovery_order()[::-1]
        lids = self._lids(order)
        sm = self._sm()
        out = [
            "#",
            f"# Topology file: generated on {time.ctime()}",
            "#",
            f"# Initiated from node {sm.guid:016x} port {sm.port_guid(1):016x}",
        ]
        for node in [n for n in order if n.kind == "switch"] + [n for n in order if n.kind != "switch"]:
            out += [
                "",
                f"vendid=0x{VENDID:x}",
                f"devid=0x{CA_DEVID if node.kind == 'ca' else SWITCH_DEVID:x}",
                f"sysimgguid=0x{node.guid:x}",
            ]
            if node.kind == "switch":
                out += [
                    f"switchguid=0x{node.guid:x}({node.guid:x})",
                    (
                        f'Switch\t{node.ports} "S-{node.guid:016x}"\t\t# "{node.name}" base port 0 '
                        f"lid {lids[node.name]} lmc 0"
                    ),
                ]
            else:
                out += [f"caguid=0x{node.guid:x}", f'Ca\t{node.ports} "H-{node.guid:016x}"\t\t# "{node.name}"']
            for port in range(1, node.ports + 1):
                there = self.peer.get((node.name, port))
                if there is not None:
                    out.append(self._nd_port_line(node, port, there, lids))
        out.append("")
        return "\n".join(out)

    def _nd_port_line(self, node: _Node, port: int, there: tuple[str, int], lids: dict[str, int]) -> str:
        remote = self.nodes[there[0]]
        width, speed = self.trained_as((node.name, port), there)
        trained = f"{width.lower()}{SPEED_NAME[speed]}"
        rid = f'"{"S" if remote.kind == "switch" else "H"}-{remote.guid:016x}"[{there[1]}]'
        if remote.kind != "switch":
            rid += f"({remote.port_guid(there[1]):x}) "
        if node.kind == "switch":
            return f'[{port}]\t{rid}\t\t# "{remote.name}" lid {lids[remote.name]} {trained}'
        return (
            f'[{port}]({node.port_guid(port):x}) \t{rid}\t\t# lid {lids[node.name]} lmc 0 "{remote.name}" '
            f"lid {lids[remote.name]} {trained}"
        )

    def iblinkinfo_text(self) -> str:
        """What ``iblinkinfo`` prints for the fabric as built (every port, down ones too)."""
        order = self._discovery_order()[::-1]
        lids = self._lids(order)
        out = []
        for node in order:
            if node.kind == "switch":
                out.append(f"Switch: 0x{node.guid:016x} {node.name}:")
            else:
                out.append(f"CA: {node.name}:")
            for port in range(1, node.ports + 1):
                out.append(self._li_port_line(node, port, lids))
        out.append("")
        return "\n".join(out)

    def _li_port_line(self, node: _Node, port: int, lids: dict[str, int]) -> str:
        there = self.peer.get((node.name, port))
        head = f"      {lids[node.name]:6d} {port:4d}[  ] =="
        if node.kind != "switch":
            head = f"      0x{node.port_guid(port):016x} {lids[node.name]:6d} {port:4d}[  ] =="
        if there is None:
            return head + '(                Down/ Polling)==>             [  ] "" ( )'
        width, speed = self.trained_as((node.name, port), there)
        could_width = f"Could be {self.width}" if width != self.width else ""
        could_speed = f"Could be {SPEED_TEXT[self.speed_gbps]}" if speed != self.speed_gbps else ""
        remote = self.nodes[there[0]]
        return (
            head + f"({width:>3} {SPEED_TEXT[speed]:>18} {'Active':>6}/{'LinkUp':>8})==>  "
            f'{lids[remote.name]:6d} {there[1]:4d}[  ] "{remote.name}" ({could_width} {could_speed})'
        )

    # --- faults -------------------------------------------------------------------------------

    def plant(
        self, *, miswires: int = 0, swaps: int = 0, missing: int = 0, degraded: int = 0, seed: int | None = 0
    ) -> list[PlantedFault]:
        """Put faults in the cabling as built (the plan stays); each touches its own cables.

        - swap: two HCAs of one host with their cables exchanged (each on the other's rail);
        - miswire: an HCA's cable plugged into a free port of another leaf;
        - missing: a cable not there (the switch port is Down/Polling; an HCA with no other
          port drops out of the scan); leaf-spine cables too, never a leaf's last uplink;
        - degraded: a cable trained at 1X (even picks) or one speed grade slower (odd picks).
        Raises ValueError when the fabric has too few candidates (or no free port)."""
        rng = random.Random(seed)  # noqa: S311 - seeded, reproducible fault picks; not a secret
        touched = {_key(f_row.a, f_row.b) for f in self.faults for f_row in f.planned}
        host_rows = [r for r in self.plan if _key(r.a, r.b) not in touched and self.nodes[r.a_device].kind == "ca"]
        planted: list[PlantedFault] = []
        planted += self._plant_swaps(rng, host_rows, swaps, touched)
        planted += self._plant_miswires(rng, host_rows, miswires, touched)
        rows = [r for r in self.plan if _key(r.a, r.b) not in touched]
        planted += self._plant_missing(rng, rows, missing, touched)
        rows = [r for r in rows if _key(r.a, r.b) not in touched]
        planted += self._plant_degraded(rng, rows, degraded, touched)
        self.faults += planted
        return planted

    def _pick(self, rng: random.Random, rows: list[PlanRow], n: int, what: str) -> list[PlanRow]:
        if n > len(rows):
            raise ValueError(f"cannot plant {n} {what}: only {len(rows)} candidate cables")
        return rng.sample(rows, n)

    def _plant_swaps(self, rng: random.Random, rows: list[PlanRow], n: int, touched: set[_Key]) -> list[PlantedFault]:
        by_host: dict[str, list[PlanRow]] = {}
        for row in rows:
            by_host.setdefault(row.a_device.split(" ", 1)[0], []).append(row)
        hosts = [h for h, own in by_host.items() if len(own) >= 2]
        if n > len(hosts):
            raise ValueError(f"cannot plant {n} swaps: only {len(hosts)} hosts with two free HCA cables")
        result = []
        for host in rng.sample(hosts, n):
            first, second = rng.sample(by_host[host], 2)
            self._cut(first.a, first.b)
            self._cut(second.a, second.b)
            self._join(first.a, second.b)
            self._join(second.a, first.b)
            touched.update({_key(first.a, first.b), _key(second.a, second.b)})
            result.append(PlantedFault("swap", (first, second), ((first.a, second.b), (second.a, first.b))))
        return result

    def _plant_miswires(
        self, rng: random.Random, rows: list[PlanRow], n: int, touched: set[_Key]
    ) -> list[PlantedFault]:
        rows = [r for r in rows if _key(r.a, r.b) not in touched]
        result = []
        for row in self._pick(rng, rows, n, "miswires"):
            free = self._free_ports(exclude=row.b_device)
            if not free:
                raise ValueError("cannot plant a miswire: no free port on another leaf")
            target = Endpoint(*rng.choice(free))
            self._cut(row.a, row.b)
            self._join(row.a, target)
            touched.add(_key(row.a, row.b))
            result.append(PlantedFault("miswire", (row,), ((row.a, target),)))
        return result

    def _free_ports(self, *, exclude: str) -> list[tuple[str, int]]:
        """Unused ports of the leaves (switches with HCAs on them), other than ``exclude``."""
        leaves = {r.b_device for r in self.plan if self.nodes[r.a_device].kind == "ca"}
        return [
            (name, port)
            for name in sorted(leaves - {exclude})
            for port in range(1, self.nodes[name].ports + 1)
            if (name, port) not in self.peer and (name, port) not in self.planned_ports
        ]

    def _plant_missing(self, rng: random.Random, rows: list[PlanRow], n: int, touched: set[_Key]) -> list[PlantedFault]:
        uplinks: dict[str, int] = {}
        for (a, _), (b, _) in self.peer.items():
            if self.nodes[a].kind == "switch" and self.nodes[b].kind == "switch":
                uplinks[a] = uplinks.get(a, 0) + 1
        candidates = rows[:]
        rng.shuffle(candidates)
        result: list[PlantedFault] = []
        for row in candidates:
            if len(result) == n:
                break
            if self.nodes[row.a_device].kind == "switch":
                if min(uplinks[row.a_device], uplinks[row.b_device]) <= 1:
                    continue  # never cut a switch off the fabric
                uplinks[row.a_device] -= 1
                uplinks[row.b_device] -= 1
            self._cut(row.a, row.b)
            touched.add(_key(row.a, row.b))
            result.append(PlantedFault("missing", (row,), ()))
        if len(result) < n:
            raise ValueError(f"cannot plant {n} missing cables: only {len(result)} can go")
        return result

    def _plant_degraded(
        self, rng: random.Random, rows: list[PlanRow], n: int, touched: set[_Key]
    ) -> list[PlantedFault]:
        result = []
        slower = sorted(s for s in SPEED_NAME if s < self.speed_gbps)
        for i, row in enumerate(self._pick(rng, rows, n, "degraded cables")):
            width, speed = ("1X", self.speed_gbps) if i % 2 == 0 or not slower else (self.width, slower[-1])
            self.trained[_key(row.a, row.b)] = (width, speed)
            touched.add(_key(row.a, row.b))
            result.append(PlantedFault("degraded", (row,), ((row.a, row.b),), width, LANES[width] * speed))
        return result

    def _cut(self, a: Endpoint, b: Endpoint) -> None:
        del self.peer[(a.device, a.port)], self.peer[(b.device, b.port)]

    def _join(self, a: Endpoint, b: Endpoint) -> None:
        self.peer[(a.device, a.port)] = (b.device, b.port)
        self.peer[(b.device, b.port)] = (a.device, a.port)


def generate_fat_tree(
    *,
    hosts: int,
    hcas_per_host: int = 8,
    leaves: int | None = None,
    spines: int | None = None,
    rail_optimized: bool = True,
    name_prefix: str = "gpu-node",
    switch_ports: int = 64,
    width: str = "4X",
    speed: str = "HDR",
    host_names: Sequence[str] | None = None,
) -> GeneratedFabric:
    """A two-level fat tree: leaves with half their ports down to HCAs and half up, every
    leaf's uplinks spread round-robin over the spines (a spine may take several of one
    leaf's). Rail-optimized: HCA k ("mlx5_k") of every host on rail k's leaves
    ("leaf-r<k>-NN"); otherwise HCAs fill the leaves ("leaf-NN") host by host. Leaves and
    spines default to the fewest that fit; too few raises ValueError."""
    if host_names is not None and len(host_names) != hosts:
        raise ValueError(f"{len(host_names)} host names for {hosts} hosts")
    if hosts < 1 or hcas_per_host < 1 or switch_ports < 2:
        raise ValueError("need at least one host, one HCA per host and two ports per switch")
    if width not in LANES or speed not in LANE_GBPS:
        raise ValueError(f"width one of {', '.join(LANES)}; speed one of {', '.join(LANE_GBPS)}")
    down = switch_ports // 2
    up = switch_ports - down
    rails = hcas_per_host if rail_optimized else 1
    per_rail = hosts if rail_optimized else hosts * hcas_per_host  # HCAs on each rail's leaves
    if leaves is None:
        leaves = math.ceil(per_rail / down) * rails
    if leaves % rails:
        raise ValueError(f"{leaves} leaves do not split into {rails} rails")
    leaves_per_rail = leaves // rails
    per_leaf = math.ceil(per_rail / leaves_per_rail)
    if per_leaf > down:
        raise ValueError(f"{per_leaf} HCAs per leaf: more than the {down} down ports of a {switch_ports}-port leaf")
    if spines is None:
        spines = math.ceil(leaves * up / switch_ports)
    if leaves * up > spines * switch_ports:
        raise ValueError(f"{leaves} leaves x {up} uplinks do not fit {spines} spines of {switch_ports} ports")

    digits = max(4, len(str(hosts)))
    nodes: dict[str, _Node] = {}
    for h in range(1, hosts + 1):
        for k in range(hcas_per_host):
            host = host_names[h - 1] if host_names else f"{name_prefix}-{h:0{digits}d}"
            name = f"{host} mlx5_{k}"
            nodes[name] = _Node(name, "ca", 1, CA_GUID_BASE + 2 * len(nodes), "H-" + name.replace(" ", "-"))
    leaf_names = [
        f"leaf-r{r}-{i:02d}" if rail_optimized else f"leaf-{i:02d}"
        for r in range(rails)
        for i in range(1, leaves_per_rail + 1)
    ]
    spine_names = [f"spine-{i:02d}" for i in range(1, spines + 1)]
    for i, name in enumerate(leaf_names + spine_names):
        nodes[name] = _Node(name, "switch", switch_ports, SWITCH_GUID_BASE + i, f"S-{name}")

    lane = LANE_GBPS[speed]
    cable_rate = LANES[width] * lane
    plan: list[PlanRow] = []
    cas = [n for n in nodes.values() if n.kind == "ca"]
    for index, ca in enumerate(cas):
        host_no, k = divmod(index, hcas_per_host)
        rail, slot = (k, host_no) if rail_optimized else (0, index)
        leaf = leaf_names[rail * leaves_per_rail + slot // per_leaf]
        plan.append(PlanRow(ca.name, 1, leaf, slot % per_leaf + 1, width, cable_rate))
    next_port = dict.fromkeys(spine_names, 1)
    for i, leaf in enumerate(leaf_names):
        for j in range(up):
            spine = spine_names[(i * up + j) % spines]
            plan.append(PlanRow(leaf, down + j + 1, spine, next_port[spine], width, cable_rate))
            next_port[spine] += 1
    return GeneratedFabric(nodes=nodes, plan=plan, width=width, speed_gbps=lane)
