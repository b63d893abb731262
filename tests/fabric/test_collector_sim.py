"""The collector against real tools: first its contract with a stand-in runner (one sweep,
errors that name the tool), then live against ibsim + opensm, where the real diags must see
exactly the generated plan, and every injected fault (pulled cable, counters, swapped
cables, a fabric built differently from the plan) as it is."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence

import pytest

from fabric.collector import CollectedOutputs, CollectorError, ToolResult, collect, subprocess_runner
from fabric.ibdiags import IbParseError, IbTopology, merge, parse_iblinkinfo, parse_ibnetdiscover
from fabric.topology import GeneratedFabric, generate_fat_tree
from sandbox.emulators.fabric import SimulatedFabric, SimulatorError

from .conftest import captured, require_ibsim

OUTPUTS = {
    "ibnetdiscover": "ibnetdiscover.txt",
    "iblinkinfo": "iblinkinfo.txt",
    "ibqueryerrors": "ibqueryerrors-after-counter-faults.txt",
}


class StandIn:
    """A runner that answers with the captured outputs and records what it was asked."""

    def __init__(self, returncodes: Mapping[str, int] | None = None, stderr: str = "") -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.returncodes, self.stderr = returncodes or {}, stderr
        self.thresholds = ""

    def __call__(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ToolResult:
        self.calls.append((list(argv), dict(env or {})))
        if "--threshold-file" in argv:
            with open(argv[argv.index("--threshold-file") + 1]) as f:
                self.thresholds = f.read()
        tool = argv[0]
        code = self.returncodes.get(tool, 1 if tool == "ibqueryerrors" else 0)
        return ToolResult(tuple(argv), code, captured(OUTPUTS[tool]), self.stderr, 0.01)


def cables(topology: IbTopology) -> set[frozenset[str]]:
    return {
        frozenset((topology.endpoint_name(x.a_guid, x.a_port), topology.endpoint_name(x.b_guid, x.b_port)))
        for x in topology.links
    }


def planned(fabric: GeneratedFabric) -> set[frozenset[str]]:
    return {frozenset((str(row.a), str(row.b))) for row in fabric.plan_rows()}


def generated(fabric: GeneratedFabric) -> IbTopology:
    return merge(parse_ibnetdiscover(fabric.ibnetdiscover_text()), parse_iblinkinfo(fabric.iblinkinfo_text()))


def port(topology: IbTopology, name: str, number: int) -> tuple[str, str]:
    state = topology.ports[(topology.by_name()[name].guid, number)]
    return state.state, state.phys_state


# --- the contract, with a stand-in runner -------------------------------------------------------


def test_one_sweep_feeds_all_three_tools_and_parses_into_node_guids():
    runner = StandIn()
    outputs = collect(runner=runner, sim_preload="/lib/libumad2sim.so", env={"IBSIM_SOCKNAME": "x1"})
    (discover, _), (linkinfo, env), (errors, _) = runner.calls
    cache = discover[discover.index("--cache") + 1]
    assert linkinfo[-2:] == ["--load-cache", cache] and errors[1:3] == ["--load-cache", cache]
    assert env["LD_PRELOAD"] == "/lib/libumad2sim.so" and env["IBSIM_SOCKNAME"] == "x1"
    assert runner.thresholds.startswith("#") and "=" not in runner.thresholds  # no threshold hides a counter
    assert set(outputs.texts()) == {"ibnetdiscover", "iblinkinfo", "ibqueryerrors"}
    topology, counters = outputs.parse()
    assert len(topology.devices) == 8 and len(topology.links) == 9
    assert [(topology.devices[c.guid].name, c.port, c.counters) for c in counters] == [
        ("gpu-node-02 mlx5_0", 1, {"symbol_error": 1234}),
        ("leaf01", 2, {"link_downed": 3, "port_rcv_errors": 17}),
    ]


def test_a_failing_tool_is_named_with_its_exit_code_and_stderr():
    runner = StandIn(returncodes={"iblinkinfo": 255}, stderr="ibpanic: [4711] main: discover failed\n")
    with pytest.raises(CollectorError, match=r"iblinkinfo: exit code 255; stderr: ibpanic: \[4711\] main: discover"):
        collect(runner=runner)
    with pytest.raises(CollectorError, match="ibqueryerrors: exit code 2"):
        collect(runner=StandIn(returncodes={"ibqueryerrors": 2}))


def test_the_subprocess_runner_times_out_names_missing_tools_and_drops_ibsim_noise(tmp_path):
    with pytest.raises(CollectorError, match=r"sleep: timed out after 0\.2 s"):
        subprocess_runner(["sleep", "5"], timeout=0.2)
    with pytest.raises(CollectorError, match="no-such-ibtool: not installed"):
        subprocess_runner(["no-such-ibtool"], timeout=5)
    script = "echo 'ibwarn: [1] sim_connect: attached as client 1 at node \"H-x\"' >&2; echo boom >&2; echo out; exit 3"
    result = subprocess_runner(["sh", "-c", script], timeout=5, cwd=str(tmp_path))
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "boom\n")


def test_collected_outputs_reparse_from_stored_text():
    stored = CollectedOutputs(**{tool: captured(name) for tool, name in OUTPUTS.items()})
    topology, counters = stored.parse()
    assert topology.by_name()["leaf02"].lid == 4 and len(counters) == 2


# --- live: ibsim + opensm + the real diags ------------------------------------------------------


def test_a_healthy_simulated_fabric_is_seen_exactly_as_planned(sim, small_fabric):
    outputs = sim.collect()
    topology, counters = outputs.parse()
    assert cables(topology) == planned(small_fabric)
    assert {(x.width, x.rate_gbps, x.state, x.phys_state) for x in topology.links} == {
        ("4X", 212.5, "Active", "LinkUp")
    }
    assert counters == []
    # The generator's text is what the real tools print: same devices, GUIDs, LIDs, ports, cables.
    assert topology == generated(small_fabric)
    assert [run.argv[0] for run in outputs.runs] == ["ibnetdiscover", "iblinkinfo", "ibqueryerrors"]


def test_a_pulled_cable_shows_down_polling_and_relink_recovers(sim, small_fabric):
    sim.unlink("gpu-node-0003 mlx5_1")
    topology = sim.topology()
    assert "gpu-node-0003 mlx5_1" not in topology.by_name()  # its only port: off the fabric
    assert port(topology, "leaf-r1-01", 3) == ("Down", "Polling")
    assert planned(small_fabric) - cables(topology) == {frozenset(("gpu-node-0003 mlx5_1/1", "leaf-r1-01/3"))}
    sim.relink("gpu-node-0003 mlx5_1")
    assert sim.topology() == generated(small_fabric)


def test_a_pulled_uplink_leaves_both_switches_with_a_down_port(sim):
    sim.unlink("leaf-r0-01", 5)
    topology = sim.topology()
    assert port(topology, "leaf-r0-01", 5) == ("Down", "Polling") == port(topology, "spine-01", 1)
    sim.relink("leaf-r0-01", 5)
    assert port(sim.topology(), "spine-01", 1) == ("Active", "LinkUp")


def test_counters_set_in_the_simulator_show_in_the_collected_counters(sim):
    sim.set_counter("gpu-node-0002 mlx5_0", 1, "SymbolErrorCounter", 1234)
    sim.set_counter("leaf-r0-01", 2, "LinkDownedCounter", 3)
    sim.set_counter("leaf-r0-01", 2, "PortRcvErrors", 17)
    topology, counters = sim.collect().parse()
    found = {(topology.devices[c.guid].name, c.port): c.counters for c in counters}
    assert found == {
        ("gpu-node-0002 mlx5_0", 1): {"symbol_error": 1234},
        ("leaf-r0-01", 2): {"link_downed": 3, "port_rcv_errors": 17},
    }  # "port ALL" is no port
    with pytest.raises(SimulatorError, match="unknown counter 'SymbolErrors'"):
        sim.set_counter("leaf-r0-01", 2, "SymbolErrors", 1)


def test_two_cables_swapped_live_are_seen_swapped(sim, small_fabric):
    sim.swap_cables(("gpu-node-0002 mlx5_0", 1), ("gpu-node-0002 mlx5_1", 1))
    got, plan = cables(sim.topology()), planned(small_fabric)
    assert plan - got == {
        frozenset(("gpu-node-0002 mlx5_0/1", "leaf-r0-01/2")),
        frozenset(("gpu-node-0002 mlx5_1/1", "leaf-r1-01/2")),
    }
    assert got - plan == {
        frozenset(("gpu-node-0002 mlx5_0/1", "leaf-r1-01/2")),
        frozenset(("gpu-node-0002 mlx5_1/1", "leaf-r0-01/2")),
    }


def test_a_fabric_built_unlike_its_plan_is_seen_as_the_generator_says():
    require_ibsim()
    fabric = generate_fat_tree(hosts=7, hcas_per_host=2, leaves=4, spines=2, switch_ports=8)
    faults = fabric.plant(miswires=1, swaps=1, missing=2, degraded=1, seed=3)  # degraded: 1X
    with SimulatedFabric(fabric, sweep_interval=1) as sim:
        folder, processes = sim.dir, (sim._ibsim, sim._opensm)
        topology = sim.topology()
    assert topology == generated(fabric)
    degraded = next(f for f in faults if f.kind == "degraded").planned[0]
    link = next(
        x
        for x in topology.links
        if frozenset((topology.endpoint_name(x.a_guid, x.a_port), topology.endpoint_name(x.b_guid, x.b_port)))
        == frozenset((str(degraded.a), str(degraded.b)))
    )
    assert (link.width, link.rate_gbps) == ("1X", 53.125)
    assert folder is not None and not folder.exists()  # stopped and cleaned up
    assert all(p is not None and p.poll() is not None for p in processes)


def test_a_topology_ibsim_cannot_build_fails_with_its_log_and_leaves_nothing_behind(tmp_path):
    require_ibsim()
    broken = tmp_path / "broken.net"
    broken.write_text('Switch\t8 "S-leaf01"\t# "leaf01"\n[1]\t"S-nope"[1]\n')
    fabric = SimulatedFabric.from_net_file(broken, start_timeout=5)
    with pytest.raises(SimulatorError, match='can\'t find remote node "S-nope"'):
        fabric.start()
    assert fabric.dir is None and fabric._ibsim is None


def test_a_killed_tool_does_not_keep_an_ibsim_client_slot(sim):
    # iblinkinfo -S hangs while opensm runs (real-components.md 1): a tool that never ends.
    hung = subprocess.Popen(
        ["iblinkinfo", "-S", "0x0002c90300100000"],
        env=sim.env(),
        cwd=sim.dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while f"pid {hung.pid} " not in sim.console("Attached") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        hung.kill()
        hung.wait()
    assert sim.drop_stale_clients() == 1
    assert sim.console("Attached").count("Client") == 1  # the SM alone
    with pytest.raises(CollectorError, match="timed out"):
        sim.run("iblinkinfo", "-S", "0x0002c90300100000", timeout=0.5)
    assert sim.console("Attached").count("Client") == 1  # run() dropped it by itself
    with pytest.raises(SimulatorError, match="ibsim refused 'Unlink \"H-nope\"'"):
        sim.console('Unlink "H-nope"')
    assert os.path.isdir(sim.dir)


def test_waiting_on_the_fabric_reads_a_snapshot_taken_mid_sweep_as_not_yet(small_fabric, monkeypatch):
    """Seen starting bin/demo: iblinkinfo read while opensm reassigned addresses showed a LID on two
    devices, the parse error ended the wait and the demo did not start. The wait now polls on until
    its deadline. (The torn snapshot is a race of the real ibsim that no test can make on purpose:
    linkinfo is replaced here by one that gives it once, then a fabric that satisfies the wait.)"""
    fabric = SimulatedFabric(small_fabric, wait_timeout=5)
    settled = object()
    reads = iter([IbParseError("iblinkinfo", 1065, "LID 8 ...", "LID 8 is used by two devices"), settled])

    def linkinfo():
        read = next(reads)
        if isinstance(read, Exception):
            raise read
        return read

    monkeypatch.setattr(fabric, "linkinfo", linkinfo)
    fabric.wait_until(lambda topo: topo is settled, "the settled fabric")

    monkeypatch.setattr(fabric, "wait_timeout", 0.2)
    monkeypatch.setattr(fabric, "linkinfo", lambda: (_ for _ in ()).throw(IbParseError("iblinkinfo", 1, "x", "torn")))
    with pytest.raises(IbParseError):  # past the deadline the last parse error is the answer
        fabric.wait_until(lambda topo: True, "a fabric that never reads whole")
