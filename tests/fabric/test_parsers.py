"""The infiniband-diags parsers, on real captured output (fixtures/README.md): every device,
cable, port state and counter read, and anything cut short or garbled refused by line."""

from __future__ import annotations

import pytest

from fabric.ibdiags import (
    ALL_PORTS,
    IbMergeError,
    IbParseError,
    counter_name,
    merge,
    normalize_guid,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_perfquery,
    parse_perfquery_blocks,
    resolve_counters,
)

from .conftest import captured

SPINE, LEAF01, LEAF02 = "0x0002c90300001000", "0x0002c90300001001", "0x0002c90300001002"
GPU01, GPU02, GPU03, UFM = "0x0002c90300002002", "0x0002c90300002004", "0x0002c90300002006", "0x0002c90300002000"
GPU02_PORT1 = "0x0002c90300002005"  # an HCA's port GUID is its node GUID + port under ibsim


def names(topology):  # type: ignore[no-untyped-def]
    """Cables as sorted endpoint-name pairs, with width, rate and state."""
    return sorted(
        (
            *sorted((topology.endpoint_name(x.a_guid, x.a_port), topology.endpoint_name(x.b_guid, x.b_port))),
            x.width,
            x.rate_gbps,
            x.state,
        )
        for x in topology.links
    )


@pytest.fixture
def healthy():  # type: ignore[no-untyped-def]
    return merge(parse_ibnetdiscover(captured("ibnetdiscover.txt")), parse_iblinkinfo(captured("iblinkinfo.txt")))


# --- ibnetdiscover ---------------------------------------------------------------------------


def test_ibnetdiscover_reads_every_switch_and_hca_by_node_guid():
    topology = parse_ibnetdiscover(captured("ibnetdiscover.txt"))
    kinds = {d.name: (d.kind, d.ports, d.lid) for d in topology.devices.values()}
    assert kinds == {
        "spine01": ("switch", 8, 2),
        "leaf01": ("switch", 8, 3),
        "leaf02": ("switch", 8, 4),
        "ufm01 mlx5_0": ("ca", 1, 1),
        "gpu-node-01 mlx5_0": ("ca", 1, 5),
        "gpu-node-02 mlx5_0": ("ca", 1, 6),
        "gpu-node-03 mlx5_0": ("ca", 1, 7),
        "gpu-node-04 mlx5_0": ("ca", 1, 8),
    }
    assert topology.devices[GPU02].name == "gpu-node-02 mlx5_0"
    assert topology.port_guids[GPU02_PORT1] == (GPU02, 1)
    assert topology.port_guids[LEAF01] == (LEAF01, 0)


def test_ibnetdiscover_lists_each_cable_once_with_width_and_rate_from_the_comments():
    topology = parse_ibnetdiscover(captured("ibnetdiscover.txt"))
    assert len(topology.links) == 9  # printed from both ends: 18 port lines
    assert names(topology)[:3] == [
        ("gpu-node-01 mlx5_0/1", "leaf01/1", "4X", 212.5, "Unknown"),
        ("gpu-node-02 mlx5_0/1", "leaf01/2", "4X", 212.5, "Unknown"),
        ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Unknown"),
    ]
    link = next(x for x in topology.links if x.a_guid == SPINE and x.a_port == 8)
    assert (link.b_guid, link.b_port, link.speed_gbps) == (UFM, 1, 53.125)
    assert topology.ports[(LEAF02, 7)].phys_state == "LinkUp"  # the scan crossed it; the state it does not say


def test_ibnetdiscover_shows_a_port_stuck_in_init_as_a_cable():
    topology = parse_ibnetdiscover(captured("ibnetdiscover-port-stuck-in-init.txt"))
    assert ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Unknown") in names(topology)


# --- iblinkinfo ------------------------------------------------------------------------------


def test_iblinkinfo_reads_every_port_down_ones_too():
    topology = parse_iblinkinfo(captured("iblinkinfo.txt"))
    assert len(topology.ports) == 29
    down = sorted(topology.endpoint_name(g, p) for (g, p), s in topology.ports.items() if s.state == "Down")
    assert down == [
        "leaf01/3",
        "leaf01/4",
        "leaf01/5",
        "leaf01/6",
        "leaf02/3",
        "leaf02/4",
        "leaf02/5",
        "leaf02/6",
        "spine01/5",
        "spine01/6",
        "spine01/7",
    ]
    polling = topology.ports[(LEAF02, 3)]
    assert (polling.phys_state, polling.width, polling.speed_gbps, polling.rate_gbps) == ("Polling", None, None, None)
    active = topology.ports[(LEAF02, 1)]
    assert (active.state, active.phys_state, active.width, active.speed_gbps, active.rate_gbps) == (
        "Active",
        "LinkUp",
        "4X",
        53.125,
        212.5,
    )


def test_iblinkinfo_keys_switches_by_their_header_guid_and_hcas_by_port_guid():
    topology = parse_iblinkinfo(captured("iblinkinfo.txt"))
    assert topology.devices[LEAF02].name == "leaf02"
    assert topology.devices[GPU02_PORT1].name == "gpu-node-02 mlx5_0"  # a CA header has no GUID
    assert topology.devices[GPU02_PORT1].lid == 6 and topology.devices[LEAF02].lid == 4


def test_iblinkinfo_finds_each_far_end_by_lid_and_lists_each_cable_once():
    topology = parse_iblinkinfo(captured("iblinkinfo.txt"))
    assert len(topology.links) == 9
    assert ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Active") in names(topology)
    assert ("leaf01/7", "spine01/1", "4X", 212.5, "Active") in names(topology)


def test_iblinkinfo_after_a_cable_is_pulled_shows_the_switch_port_down_polling_and_no_host():
    topology = parse_iblinkinfo(captured("iblinkinfo-after-unlink-gpu-node-03.txt"))
    state = topology.ports[(LEAF02, 1)]
    assert (state.state, state.phys_state) == ("Down", "Polling")
    assert "gpu-node-03 mlx5_0" not in {d.name for d in topology.devices.values()}
    assert len(topology.links) == 8


def test_iblinkinfo_after_relink_is_active_again():
    topology = parse_iblinkinfo(captured("iblinkinfo-after-relink.txt"))
    assert topology.ports[(LEAF02, 1)].state == "Active"
    assert ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Active") in names(topology)


def test_iblinkinfo_reads_a_port_stuck_in_initialize():
    topology = parse_iblinkinfo(captured("iblinkinfo-port-stuck-in-init.txt"))
    state = topology.ports[(LEAF02, 1)]
    assert (state.state, state.phys_state, state.width) == ("Initialize", "LinkUp", "4X")
    assert ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Initialize") in names(topology)


def test_iblinkinfo_finds_a_far_end_by_unique_name_when_lids_are_zero():
    text = captured("iblinkinfo.txt").replace("      4    1[  ] ==( 4X", "      0    1[  ] ==( 4X", 1)
    text = text.replace("==>       4    1[  ]", "==>       0    1[  ]")
    assert ("gpu-node-03 mlx5_0/1", "leaf02/1", "4X", 212.5, "Active") in names(parse_iblinkinfo(text))


def test_iblinkinfo_refuses_a_far_end_it_cannot_tell_apart():
    text = captured("iblinkinfo.txt").replace("leaf01", "leaf02")  # two switches named leaf02
    assert len(parse_iblinkinfo(text).links) == 9  # their LIDs still tell them apart
    text = text.replace("==>       3    1[  ]", "==>       0    1[  ]")
    with pytest.raises(IbParseError, match="line 8: cannot tell which device the far end is: LID 0, name 'leaf02'"):
        parse_iblinkinfo(text)


# --- merge -----------------------------------------------------------------------------------


def test_merge_keys_everything_by_node_guid_with_iblinkinfo_states(healthy):
    assert set(healthy.devices) == set(parse_ibnetdiscover(captured("ibnetdiscover.txt")).devices)
    assert healthy.devices[GPU02].lid == 6
    assert len(healthy.ports) == 29 and (GPU02, 1) in healthy.ports and (GPU02_PORT1, 1) not in healthy.ports
    assert {x.state for x in healthy.links} == {"Active"}
    assert healthy.endpoint_name(GPU02, 1) == "gpu-node-02 mlx5_0/1"
    assert healthy.peers()[(GPU02, 1)] == (LEAF01, 2)
    assert healthy.device_guid(GPU02_PORT1) == GPU02 and healthy.device_guid("0x0000000000000001") is None


def test_merge_refuses_outputs_that_cable_a_port_to_two_places():
    discovered = parse_ibnetdiscover(captured("ibnetdiscover.txt"))
    moved = captured("iblinkinfo.txt").replace('       3    7[  ] "leaf01"', '       3    6[  ] "leaf01"')
    moved = moved.replace(
        '           3    6[  ] ==(                Down/ Polling)==>             [  ] "" ( )',
        "           3    6[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>       2    1[  ] "
        '"spine01" (Could be 12X )',
    )
    moved = moved.replace(
        "           3    7[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>       2    1[  ] "
        '"spine01" (Could be 12X )',
        '           3    7[  ] ==(                Down/ Polling)==>             [  ] "" ( )',
    )
    with pytest.raises(IbMergeError, match="spine01/1 is cabled to leaf01/6 in iblinkinfo but to leaf01/7"):
        merge(discovered, parse_iblinkinfo(moved))


# --- counters --------------------------------------------------------------------------------


def test_perfquery_reads_every_counter_under_sysfs_names():
    counters = parse_perfquery(captured("perfquery-lid5-port1.txt"), guid="0x2c90300002002")
    assert (counters.guid, counters.port) == (GPU01, 1)
    assert counters.counters["symbol_error"] == 0 and counters.counters["vl15_dropped"] == 0
    assert (counters.counters["port_xmit_data"], counters.counters["port_rcv_packets"]) == (1656, 24)
    assert "counter_select" not in counters.counters and "port_select" not in counters.counters
    assert len(counters.counters) == 18


def test_perfquery_extended_and_aggregate_blocks():
    extended = parse_perfquery(captured("perfquery-x-lid3-port2.txt"))
    assert extended.port == 2 and extended.counters["port_xmit_data"] > 123456789012
    assert extended.counters["unicast_xmit_packets"] == 0
    aggregate = parse_perfquery(captured("perfquery-lid5-port1.txt").replace("port 1 (", "port 255 ("))
    assert aggregate.port == ALL_PORTS
    both = parse_perfquery_blocks(captured("perfquery-lid5-port1.txt") + captured("perfquery-x-lid3-port2.txt"))
    assert [b.port for b in both] == [1, 2]
    with pytest.raises(IbParseError, match="2 counter blocks"):
        parse_perfquery(captured("perfquery-lid5-port1.txt") * 2)


def test_ibqueryerrors_healthy_fabric_reports_nothing():
    assert parse_ibqueryerrors(captured("ibqueryerrors.txt")) == []


def test_ibqueryerrors_reports_only_the_counters_it_printed_and_skips_port_all():
    found = parse_ibqueryerrors(captured("ibqueryerrors-after-counter-faults.txt"))
    assert [(c.guid, c.port, c.counters) for c in found] == [
        (GPU02_PORT1, 1, {"symbol_error": 1234}),
        (LEAF01, 2, {"link_downed": 3, "port_rcv_errors": 17}),  # not the "port ALL" sum
    ]
    assert parse_ibqueryerrors(captured("ibqueryerrors-after-unlink-gpu-node-03.txt")) == found


def test_ibqueryerrors_counters_resolve_to_node_guids(healthy):
    found = resolve_counters(parse_ibqueryerrors(captured("ibqueryerrors-after-counter-faults.txt")), healthy)
    assert [(c.guid, c.port) for c in found] == [(GPU02, 1), (LEAF01, 2)]
    stranger = parse_ibqueryerrors(
        captured("ibqueryerrors-after-counter-faults.txt").replace("2c90300002005", "2c90300009999")
    )
    with pytest.raises(IbMergeError, match="not on the fabric"):
        resolve_counters(stranger, healthy)


def test_ibqueryerrors_with_data_counters_and_link_info_lines():
    found = parse_ibqueryerrors(captured("ibqueryerrors-data-report-port.txt"))
    assert [(c.guid, c.port) for c in found] == [(GPU02_PORT1, 1), (LEAF01, 2)]
    assert found[0].counters["symbol_error"] == 1234 and found[0].counters["port_xmit_data"] > 0
    assert found[1].counters["port_xmit_wait"] == 99 and found[1].counters["port_xmit_data"] > 123456789012
    data = parse_ibqueryerrors(captured("ibqueryerrors-counters.txt"))
    assert len(data) == 29 and data[0].guid == "0x0002c90300002008"  # data lines print the node GUID
    assert set(data[0].counters) >= {"port_xmit_data", "port_rcv_data", "unicast_xmit_packets"}


def test_counter_names_outside_the_table_become_snake_case():
    assert counter_name("PortLocalPhysicalErrors") == "port_local_physical_errors"
    assert counter_name("VL15Dropped") == "vl15_dropped"
    assert counter_name("PortXmitPkts") == "port_xmit_packets"


# --- refusals --------------------------------------------------------------------------------


def _cut(text: str, fraction: float) -> str:
    return text[: int(len(text) * fraction)]


@pytest.mark.parametrize(
    ("parser", "text", "line_no", "reason"),
    [
        # cut mid-line: the last line is unreadable
        (parse_ibnetdiscover, _cut(captured("ibnetdiscover.txt"), 0.5), 32, "unreadable line"),
        # cut where the HCAs' records begin: the switches' cables lead nowhere
        (
            parse_ibnetdiscover,
            captured("ibnetdiscover.txt").split("\nvendid=0x2c9\ndevid=0x101b\n")[0],
            None,
            "no node record",
        ),
        # a port line lost: the cable is listed from one end only
        (
            parse_ibnetdiscover,
            captured("ibnetdiscover.txt").replace(
                '[8]\t"H-0002c90300002000"[1](2c90300002001) \t\t# "ufm01 mlx5_0" lid 1 4xHDR\n', ""
            ),
            69,
            "one end only",
        ),
        (parse_iblinkinfo, _cut(captured("iblinkinfo.txt"), 0.6), None, "unreadable line|one end only"),
        (parse_iblinkinfo, captured("iblinkinfo.txt").rsplit("\n", 2)[0] + "\n", 36, "without port lines"),
        (parse_ibqueryerrors, _cut(captured("ibqueryerrors-after-counter-faults.txt"), 0.55), 5, "expected 'GUID"),
        (
            parse_ibqueryerrors,
            captured("ibqueryerrors-after-counter-faults.txt").split("\n\n")[0],
            None,
            "no '## Summary' line",
        ),
        (parse_perfquery, "", None, "no counters"),
        (parse_perfquery, captured("perfquery-lid5-port1.txt").replace("1656", "lots"), 18, "invalid literal"),
    ],
)
def test_truncated_output_is_refused_with_its_line(parser, text, line_no, reason):  # type: ignore[no-untyped-def]
    with pytest.raises(IbParseError, match=reason) as refused:
        parser(text)
    if line_no is not None:
        assert refused.value.line_no == line_no and repr(refused.value.line) in str(refused.value)


@pytest.mark.parametrize("parser", [parse_ibnetdiscover, parse_iblinkinfo, parse_ibqueryerrors, parse_perfquery])
def test_garbage_is_refused_by_every_parser(parser):  # type: ignore[no-untyped-def]
    with pytest.raises(IbParseError, match="line 1") as refused:
        parser("<html>502 Bad Gateway</html>\n")
    assert refused.value.line == "<html>502 Bad Gateway</html>"


def test_an_unknown_port_state_or_line_mode_output_is_refused():
    bad_state = captured("iblinkinfo.txt").replace("Active/  LinkUp", "Avtive/  LinkUp", 1)
    with pytest.raises(IbParseError, match="line 2: unknown port state 'Avtive'"):
        parse_iblinkinfo(bad_state)
    line_mode = '0x0002c90300002009 "            gpu-node-04 mlx5_0"      8    1[  ] ==( 4X 53.125 Gbps Active/'
    with pytest.raises(IbParseError, match="line 1: unknown line"):
        parse_iblinkinfo(line_mode)


def test_guids_are_normalised():
    assert normalize_guid("2c90300001002") == "0x0002c90300001002" == normalize_guid("0x0002C90300001002")
    with pytest.raises(ValueError):
        normalize_guid("0x0")
