"""The validation engine on small hand-made fabrics: each kind of discrepancy on the right
ports, nothing reported for a fabric that matches its plan."""

from __future__ import annotations

from fabric.choices import DiscrepancyKind as K
from fabric.validation import (
    PlanLink,
    Port,
    Seen,
    SeenLink,
    compare,
    counter_deltas,
    counter_problems,
    flap_problem,
)


def P(text: str) -> Port:  # noqa: N802 - reads like the Port it builds: P('leaf01/3')
    device, port = text.rsplit("/", 1)
    return Port(device, int(port))


PLAN = [
    PlanLink(P("gpu-01 mlx5_0/1"), P("leaf01/1"), "4X", 400.0),
    PlanLink(P("gpu-02 mlx5_0/1"), P("leaf01/2"), "4X", 400.0),
    PlanLink(P("gpu-03 mlx5_0/1"), P("leaf02/1"), "4X", 400.0),
    PlanLink(P("gpu-04 mlx5_0/1"), P("leaf02/2"), "4X", 400.0),
    PlanLink(P("leaf01/7"), P("spine01/1"), "4X", 400.0),
    PlanLink(P("leaf02/7"), P("spine01/2"), "4X", 400.0),
]


def seen_as_planned() -> Seen:
    links = [SeenLink(p.a, p.b, "4X", 400.0) for p in PLAN]
    return Seen(links=links, devices={p.a.device for p in PLAN} | {p.b.device for p in PLAN})


def kinds(problems):
    return sorted((p.kind, p.a, p.b) for p in problems)


def test_a_fabric_as_planned_has_no_discrepancy():
    assert compare(PLAN, seen_as_planned()) == []


def test_a_pulled_cable_is_a_link_down_on_its_ports_and_a_vanished_one_is_missing():
    seen = seen_as_planned()
    seen.links = [link for link in seen.links if link.a.device not in ("gpu-03 mlx5_0", "gpu-04 mlx5_0")]
    seen.down_ports[P("leaf02/1")] = "Down/Polling"  # the switch still sees its port; the host is gone
    seen.devices -= {"gpu-04 mlx5_0"}
    assert kinds(compare(PLAN, seen)) == [
        (K.LINK_DOWN, "gpu-03 mlx5_0/1", "leaf02/1"),
        (K.MISSING, "gpu-04 mlx5_0/1", "leaf02/2"),
    ]


def test_two_swapped_cables_are_one_swap_naming_all_four_ports():
    seen = seen_as_planned()
    seen.links[0] = SeenLink(P("gpu-01 mlx5_0/1"), P("leaf01/2"), "4X", 400.0)
    seen.links[1] = SeenLink(P("gpu-02 mlx5_0/1"), P("leaf01/1"), "4X", 400.0)
    (problem,) = compare(PLAN, seen)
    assert problem.kind == K.SWAPPED
    assert problem.endpoints == ["gpu-01 mlx5_0/1", "gpu-02 mlx5_0/1", "leaf01/1", "leaf01/2"]
    assert "gpu-01 mlx5_0/1 <-> leaf01/2" in problem.found


def test_a_cable_on_the_wrong_switch_port_is_miswired_with_where_it_goes():
    seen = seen_as_planned()
    seen.links[2] = SeenLink(P("gpu-03 mlx5_0/1"), P("leaf02/5"), "4X", 400.0)
    (problem,) = compare(PLAN, seen)
    assert (problem.kind, problem.a, problem.b) == (K.MISWIRED, "gpu-03 mlx5_0/1", "leaf02/1")
    assert problem.found == "gpu-03 mlx5_0/1 <-> leaf02/5" and problem.endpoints[-1] == "leaf02/5"


def test_a_narrow_or_slow_link_is_degraded():
    seen = seen_as_planned()
    seen.links[4] = SeenLink(P("leaf01/7"), P("spine01/1"), "1X", 100.0)
    (problem,) = compare(PLAN, seen)
    assert problem.kind == K.DEGRADED and problem.found == "width 1X of 4X, 100 Gb/s of 400"


def test_unplanned_cables_and_devices_are_reported():
    seen = seen_as_planned()
    seen.links.append(SeenLink(P("leaf01/5"), P("leaf02/5")))
    seen.links.append(SeenLink(P("ufm01 mlx5_0/1"), P("spine01/8")))
    seen.devices.add("ufm01 mlx5_0")
    assert kinds(compare(PLAN, seen)) == [
        (K.UNEXPECTED, "leaf01/5", "leaf02/5"),
        (K.UNKNOWN_DEVICE, "ufm01 mlx5_0", ""),
    ]


def test_counter_deltas_handle_a_reset():
    assert counter_deltas({"symbol_error": 10, "link_downed": 5}, {"symbol_error": 25, "link_downed": 2}) == {
        "symbol_error": 15,
        "link_downed": 2,
    }
    assert counter_deltas(None, {"symbol_error": 3}) == {}


def test_rising_counters_over_their_limit_are_a_problem_and_slow_ones_are_not():
    port = P("leaf01/2")
    assert counter_problems(port, {"symbol_error": 500}, {"symbol_error": 100}, hours=6.0) is None  # 17/h
    problem = counter_problems(port, {"symbol_error": 1234}, {"symbol_error": 1234}, hours=0.5)
    assert problem.kind == K.COUNTER_ERRORS and problem.found == "symbol_error +1234 in 0.5 h"
    assert counter_problems(port, {"excessive_buffer_overrun_errors": 1}, None, hours=None).kind == K.COUNTER_ERRORS


def test_flapping_needs_three_flaps_in_the_window():
    assert flap_problem(P("leaf01/2"), 2) is None
    assert flap_problem(P("leaf01/2"), 3).found == "3 link-down events in 12 h"
