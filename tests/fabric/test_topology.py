"""The fabric generator: rail-optimized fat trees, their cabling plan, the diags' text for them
(read back by the real parsers), planted faults reported exactly, and a 2,000-host fabric
parsed in about a second."""

from __future__ import annotations

import csv
import io
import time
from collections import Counter

import pytest

from fabric.ibdiags import IbTopology, merge, parse_iblinkinfo, parse_ibnetdiscover
from fabric.topology import PLAN_HEADER, GeneratedFabric, generate_fat_tree

from .conftest import SMALL


def seen(fabric: GeneratedFabric) -> IbTopology:
    return merge(parse_ibnetdiscover(fabric.ibnetdiscover_text()), parse_iblinkinfo(fabric.iblinkinfo_text()))


def cables(topology: IbTopology) -> set[frozenset[str]]:
    return {
        frozenset((topology.endpoint_name(x.a_guid, x.a_port), topology.endpoint_name(x.b_guid, x.b_port)))
        for x in topology.links
    }


def planned(fabric: GeneratedFabric) -> set[frozenset[str]]:
    return {frozenset((str(row.a), str(row.b))) for row in fabric.plan_rows()}


def test_a_rail_optimized_fat_tree_puts_hca_k_of_every_host_on_rail_k():
    fabric = generate_fat_tree(**SMALL)
    rows = fabric.plan_rows()
    host_rows = [r for r in rows if " " in r.a_device]
    assert len(host_rows) == 16 and len(rows) == 32
    for row in host_rows:
        rail = row.a_device.rsplit("mlx5_", 1)[1]
        assert row.b_device.startswith(f"leaf-r{rail}-")
    assert Counter(r.b_device for r in host_rows) == {
        "leaf-r0-01": 4,
        "leaf-r0-02": 4,
        "leaf-r1-01": 4,
        "leaf-r1-02": 4,
    }
    uplinks = [r for r in rows if r.a_device.startswith("leaf")]
    assert Counter(r.b_device for r in uplinks) == {"spine-01": 8, "spine-02": 8}
    assert Counter((r.a_device, r.b_device) for r in uplinks)[("leaf-r0-01", "spine-01")] == 2
    ends = [(r.a_device, r.a_port) for r in rows] + [(r.b_device, r.b_port) for r in rows]
    assert len(ends) == len(set(ends))  # no port cabled twice
    assert {(r.width, r.rate_gbps) for r in rows} == {("4X", 212.5)}


def test_the_plan_is_a_csv_with_the_importers_columns():
    fabric = generate_fat_tree(**SMALL)
    table = list(csv.reader(io.StringIO(fabric.plan_csv())))
    assert tuple(table[0]) == PLAN_HEADER == ("a_device", "a_port", "b_device", "b_port", "width", "rate_gbps")
    assert table[1] == ["gpu-node-0001 mlx5_0", "1", "leaf-r0-01", "1", "4X", "212.5"]
    assert table[-1][0].startswith("leaf-r1-02") and table[-1][2].startswith("spine-")


def test_defaults_size_leaves_and_spines_for_64_port_switches():
    fabric = generate_fat_tree(hosts=100, hcas_per_host=8)
    switches = [n for n in fabric.nodes.values() if n.kind == "switch"]
    assert sum(n.name.startswith("leaf-r") for n in switches) == 8 * 4  # ceil(100 / 32) per rail
    assert sum(n.name.startswith("spine-") for n in switches) == 16  # 32 leaves x 32 uplinks / 64
    flat = generate_fat_tree(hosts=8, hcas_per_host=2, switch_ports=8, rail_optimized=False)
    assert {r.b_device for r in flat.plan_rows() if " " in r.a_device} == {"leaf-01", "leaf-02", "leaf-03", "leaf-04"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hosts": 10, "hcas_per_host": 2, "leaves": 2, "switch_ports": 8}, "more than the 4 down ports"),
        ({"hosts": 8, "hcas_per_host": 2, "leaves": 3, "switch_ports": 8}, "do not split into 2 rails"),
        ({"hosts": 8, "hcas_per_host": 2, "leaves": 4, "spines": 1, "switch_ports": 8}, "do not fit 1 spines"),
    ],
)
def test_a_fabric_that_cannot_be_built_is_refused(kwargs, message):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        generate_fat_tree(**kwargs)


def test_the_generated_diags_text_reads_back_as_the_plan():
    fabric = generate_fat_tree(**SMALL)
    topology = seen(fabric)
    assert cables(topology) == planned(fabric)
    assert len(topology.devices) == 22 and {x.state for x in topology.links} == {"Active"}
    assert {(x.width, x.rate_gbps) for x in topology.links} == {("4X", 212.5)}
    assert sum(s.state == "Down" for s in topology.ports.values()) == 0  # every port of the small fabric is used
    lids = sorted(d.lid for d in topology.devices.values())
    assert lids == list(range(1, 23)) and topology.by_name()["gpu-node-0001 mlx5_0"].lid == 1  # the SM's


def test_the_ibsim_topology_file_names_nodes_and_cables():
    net = generate_fat_tree(**SMALL).net_file()
    lines = net.splitlines()
    assert lines[2:5] == ["width=3", "speed=7", "extspeed=7"]  # 4X (or 1X), up to HDR: trains 4X HDR
    assert lines[9] == 'Hca\t1 "H-gpu-node-0001-mlx5_0"\t# "gpu-node-0001 mlx5_0"'  # the SM's: first
    assert '[1]\t"S-leaf-r0-01"[1]' in net and 'Switch\t8 "S-spine-02"\t# "spine-02"' in net


def test_planted_faults_are_reported_exactly_and_the_diags_text_shows_each_of_them():
    fabric = generate_fat_tree(hosts=7, hcas_per_host=2, leaves=4, spines=2, switch_ports=8)
    faults = fabric.plant(miswires=1, swaps=1, missing=2, degraded=2, seed=7)
    assert Counter(f.kind for f in faults) == {"miswire": 1, "swap": 1, "missing": 2, "degraded": 2}
    touched = [row for f in faults for row in f.planned]
    assert len(touched) == len(set(touched)) == 7  # each fault its own cables
    topology = seen(fabric)
    got, plan = cables(topology), planned(fabric)
    expected_missing = {frozenset((str(r.a), str(r.b))) for f in faults if f.kind != "degraded" for r in f.planned}
    expected_new = {frozenset(map(str, pair)) for f in faults if f.kind in ("swap", "miswire") for pair in f.actual}
    assert plan - got == expected_missing and got - plan == expected_new  # and nothing else differs
    swap = next(f for f in faults if f.kind == "swap")
    (hca_a, _leaf_b), (hca_b, _leaf_a) = swap.actual
    assert hca_a.device.split()[0] == hca_b.device.split()[0]  # two HCAs of one host, each on the other's rail
    for fault in (f for f in faults if f.kind == "degraded"):
        row = fault.planned[0]
        link = next(
            x
            for x in topology.links
            if {topology.endpoint_name(x.a_guid, x.a_port), topology.endpoint_name(x.b_guid, x.b_port)}
            == {str(row.a), str(row.b)}
        )
        assert (link.width, link.rate_gbps) == (fault.width, fault.rate_gbps) and fault.rate_gbps < 212.5
    pulled = next(f for f in faults if f.kind == "missing" and " " in f.planned[0].a_device).planned[0]
    assert pulled.a_device not in topology.by_name()  # its only cable is gone: off the fabric
    leaf = topology.by_name()[pulled.b_device]
    assert (
        topology.ports[(leaf.guid, pulled.b_port)].state,
        topology.ports[(leaf.guid, pulled.b_port)].phys_state,
    ) == ("Down", "Polling")


def test_planting_more_faults_than_the_fabric_can_hold_is_refused():
    full = generate_fat_tree(**SMALL)
    with pytest.raises(ValueError, match="no free port"):
        full.plant(miswires=1)
    with pytest.raises(ValueError, match="only 8 hosts"):
        generate_fat_tree(**SMALL).plant(swaps=9)
    slow = generate_fat_tree(**SMALL)
    slow.plant(degraded=2, seed=1)
    with pytest.raises(ValueError, match="cannot train one cable slower"):
        slow.net_file()


def test_a_2000_host_fabric_is_generated_and_parsed_in_seconds():
    """2,000 hosts x 8 HCAs, 504 leaves, 252 spines: 16,000 host cables + 16,128 leaf-spine.
    Measured on the dev machine (one core): generate 0.1 s, text 0.5 s; parse ibnetdiscover
    0.46 s (165k lines), iblinkinfo 0.52 s (81k lines), merge 0.13 s."""
    started = time.perf_counter()
    fabric = generate_fat_tree(hosts=2000, hcas_per_host=8)
    faults = fabric.plant(miswires=5, swaps=5, missing=5, degraded=5, seed=1)
    discovered, linkinfo = fabric.ibnetdiscover_text(), fabric.iblinkinfo_text()
    generated = time.perf_counter()
    topology = merge(parse_ibnetdiscover(discovered), parse_iblinkinfo(linkinfo))
    parsed = time.perf_counter()
    print(
        f"\n2,000-host fabric: generated in {generated - started:.2f} s, parsed + merged in "
        f"{parsed - generated:.2f} s ({len(discovered.splitlines()) + len(linkinfo.splitlines())} lines)"
    )
    assert len(topology.links) == 16_000 + 16_128 - 5  # the 5 missing cables
    cut_off = sum(f.kind == "missing" and " " in f.planned[0].a_device for f in faults)  # HCAs with no cable left
    assert len(topology.devices) == 16_000 + 756 - cut_off
    assert parsed - generated < 10  # ~1.1 s here; generous for a loaded CI machine
