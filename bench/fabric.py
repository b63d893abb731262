"""Benchmark fabric validation at fleet scale: parse plus validation of one full run.

Generates a rail-optimized two-level fat tree (default 2,000 nodes x 8 HCAs: 16,000 host
cables plus the leaf-spine cables), plants faults in the cabling as built (miswires, swapped
pairs, missing cables, degraded links) and flapping / error-counting ports, renders what
ibnetdiscover and iblinkinfo print for it (the real formats, ``fabric.topology``), then
times, in one run on this machine:
  parse     ibnetdiscover + iblinkinfo text -> topology (fabric.ibdiags), merged
  convert   topology -> what the validation compares (fabric.discovery)
  compare   against the cabling plan (fabric.validation.compare)
  counters  every port's counter increases, limits and the flap window (4 looks)
and checks that every planted fault is found on the right ports and nothing else is.
Target (issue 5): parse + validation under 10 s on this 2-core machine.

With --db (bin/bench runs it on a throwaway PostgreSQL) it also times importing the plan
and recording the run (links, counters, discrepancies, tickets) through fabric.services.

Usage: bin/bench fabric [--hosts 2000] [--hcas 8] [--db]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
os.environ["DEBUG"] = "0"

import django  # noqa: E402

django.setup()

from fabric.choices import DiscrepancyKind as K  # noqa: E402
from fabric.discovery import seen_from_topology  # noqa: E402
from fabric.ibdiags import merge, parse_iblinkinfo, parse_ibnetdiscover  # noqa: E402
from fabric.topology import generate_fat_tree  # noqa: E402
from fabric.validation import (  # noqa: E402
    FLAP_COUNTER,
    PlanLink,
    Port,
    compare,
    counter_deltas,
    counter_problems,
    flap_problem,
)

# What each planted fault must be reported as.
EXPECTED_KIND = {
    "miswire": {K.MISWIRED},
    "swap": {K.SWAPPED},
    "missing": {K.MISSING, K.LINK_DOWN},
    "degraded": {K.DEGRADED},
}


def timed(label: str, figures: dict[str, float], fn, *args):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = fn(*args)
    figures[label] = time.perf_counter() - started
    return result


def counter_looks(ports: list[Port], flapping: list[Port], erroring: list[Port]) -> list[dict[Port, dict[str, int]]]:
    """Four looks an hour apart at every port's counters: flapping ports' LinkDowned goes
    0, 1, 2, 4; erroring ports' SymbolError jumps in the last hour; the rest stay clean."""
    looks = []
    for i, downed in enumerate((0, 1, 2, 4)):
        look = {p: {"symbol_error": 0, FLAP_COUNTER: 0, "port_rcv_errors": 0} for p in ports}
        for p in flapping:
            look[p][FLAP_COUNTER] = downed
        if i == 3:
            for p in erroring:
                look[p]["symbol_error"] = 5_000
        looks.append(look)
    return looks


def analyse_counters(looks: list[dict[Port, dict[str, int]]]) -> list:  # type: ignore[type-arg]
    """What record_run does with counters, in memory: deltas, limits, flaps in the window."""
    previous, flaps, problems = None, defaultdict(int), []
    for look in looks:
        problems = []
        for port, values in look.items():
            before = previous.get(port) if previous else None
            deltas = counter_deltas(before, values) if before is not None else None
            if deltas and deltas.get(FLAP_COUNTER, 0) > 0:
                flaps[port] += deltas[FLAP_COUNTER]
            problem = counter_problems(port, values, deltas, 1.0 if deltas is not None else None)
            if problem:
                problems.append(problem)
        problems += [p for p in (flap_problem(port, n) for port, n in flaps.items()) if p]
        previous = look
    return problems


def check(planted, problems) -> tuple[Counter, list[str], list[str]]:  # type: ignore[no-untyped-def]
    """(found per planted kind, planted faults not found, problems no fault explains)."""
    expected = {}
    for fault in planted:
        ends = frozenset(str(e) for row in fault.planned for e in (row.a, row.b))
        expected[ends] = fault
    found, explained, missed = Counter(), set(), []
    by_ends = {}
    for problem in problems:
        by_ends.setdefault(frozenset(e for e in problem.endpoints if _planned(e, expected)), []).append(problem)
    for ends, fault in expected.items():
        hits = [p for p in by_ends.get(ends, []) if p.kind in EXPECTED_KIND[fault.kind]]
        if hits:
            found[fault.kind] += 1
            explained.update(id(p) for p in hits)
        else:
            missed.append(f"{fault.kind} {sorted(ends)}")
    false = [
        f"{p.kind} {p.endpoints}"
        for p in problems
        if id(p) not in explained and p.kind not in (K.COUNTER_ERRORS, K.FLAPPING)
    ]
    return found, missed, false


def _planned(endpoint: str, expected: dict) -> bool:  # type: ignore[type-arg]
    return any(endpoint in ends for ends in expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--hcas", type=int, default=8)
    parser.add_argument("--miswires", type=int, default=25)
    parser.add_argument("--swaps", type=int, default=10)
    parser.add_argument("--missing", type=int, default=25)
    parser.add_argument("--degraded", type=int, default=25)
    parser.add_argument("--flapping", type=int, default=15)
    parser.add_argument("--erroring", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", action="store_true", help="also time plan import and record_run on the database")
    args = parser.parse_args()

    started = time.perf_counter()
    fabric = generate_fat_tree(hosts=args.hosts, hcas_per_host=args.hcas)
    planted = fabric.plant(
        miswires=args.miswires, swaps=args.swaps, missing=args.missing, degraded=args.degraded, seed=args.seed
    )
    plan = [
        PlanLink(Port(r.a_device, r.a_port), Port(r.b_device, r.b_port), r.width, r.rate_gbps)
        for r in fabric.plan_rows()
    ]
    netdiscover, linkinfo = fabric.ibnetdiscover_text(), fabric.iblinkinfo_text()
    rng = random.Random(args.seed)
    clean_ports = sorted(
        {p for link in plan for p in (link.a, link.b)}
        - {Port(e.device, e.port) for f in planted for row in f.planned for e in (row.a, row.b)}
    )
    odd = rng.sample(clean_ports, args.flapping + args.erroring)
    looks = counter_looks(clean_ports, odd[: args.flapping], odd[args.flapping :])
    setup = time.perf_counter() - started

    figures: dict[str, float] = {}
    topology = timed("parse", figures, lambda: merge(parse_ibnetdiscover(netdiscover), parse_iblinkinfo(linkinfo)))
    seen, _, _ = timed("convert", figures, seen_from_topology, topology)
    problems = timed("compare", figures, compare, plan, seen)
    counter_found = timed("counters", figures, analyse_counters, looks)
    total = sum(figures.values())

    found, missed, false = check(planted, problems)
    flapping = {p.a for p in counter_found if p.kind == K.FLAPPING}
    erroring = {p.a for p in counter_found if p.kind == K.COUNTER_ERRORS}
    host_links = sum(1 for link in plan if " " in link.a.device or " " in link.b.device)
    print(
        f"fabric: {args.hosts} nodes x {args.hcas} HCAs, {len(topology.devices):,} devices, "
        f"{host_links:,} host cables + {len(plan) - host_links:,} switch cables planned, "
        f"{len(seen.links):,} cables seen; {len(netdiscover) + len(linkinfo):,} bytes of tool output "
        f"(generated in {setup:.1f} s, not timed)"
    )
    for label in ("parse", "convert", "compare", "counters"):
        print(f"  {label:<9} {figures[label]:7.3f} s")
    print(
        f"  {'total':<9} {total:7.3f} s   (target < 10 s: {'met' if total < 10 else 'MISSED'}, "
        f"{total / 10:.2f} of the budget)"
    )
    kinds = Counter(f.kind for f in planted)
    print(
        "planted -> found: "
        + ", ".join(f"{k} {found[k]}/{n}" for k, n in sorted(kinds.items()))
        + f"; flapping ports {len(flapping & set(map(str, odd[: args.flapping])))}/{args.flapping}"
        + f"; erroring ports {len(erroring & set(map(str, odd[args.flapping :])))}/{args.erroring}"
    )
    print(
        f"missed: {len(missed)}  false: {len(false) + len(flapping - set(map(str, odd[: args.flapping]))) + len(erroring - set(map(str, odd[args.flapping :])))}"
    )
    for line in (missed + false)[:10]:
        print("   ", line)
    if args.db:
        db_figures(fabric, seen, looks[-1])


def db_figures(fabric, seen, counters) -> None:  # type: ignore[no-untyped-def]
    from django.core.management import call_command
    from django.db import connection

    from fabric.plan import import_plan
    from fabric.services import record_run
    from nodes.services import Actor

    call_command("migrate", verbosity=0)
    actor = Actor.system("bench")
    started = time.perf_counter()
    import_plan(fabric.plan_csv(), actor=actor, source="bench")
    imported = time.perf_counter() - started
    started = time.perf_counter()
    run = record_run(seen, counters, actor=actor)
    recorded = time.perf_counter() - started
    print(
        f"database ({connection.vendor}): plan import {imported:.2f} s; record_run {recorded:.2f} s "
        f"({run.summary['discrepancies']} discrepancies, {run.summary['tickets_opened']} tickets opened)"
    )


if __name__ == "__main__":
    main()
