"""What a simulation run tells an operator, as a dict (JSON) and as text; two runs side by side.

Read from the run's ledger (the ground truth: which faults happened, when, what cured them,
the synchronous job's interruptions) and from the database (what Nodewarden did: findings,
remediations and their steps, tickets, RMA cases, state changes).

- Interruptions of the synchronous job, by cause, against the Llama 3 paper's 419 in 54 days on
  2,048 nodes scaled to this fleet, duration and rate scale; Nodewarden's own evictions apart.
- Effective training time ratio: work kept / wall time (checkpoint interval, restart cost given).
- MTTR by cause: from the fault to the node back in production (median, mean, p90), and the
  faults never taken out of production or still out at the end.
- Nodes in each state over time (daily means of hourly samples; the JSON has every sample).
- Actions by rung (steps run, passed, failed), remediations by outcome, tickets and RMA cases.
- Capacity lost: node-hours out of production and in remediation, GPU-hours (fenced GPUs
  included), GPU resets done and failed, GPUs fenced; ``render_gpu_rungs`` sets the run with
  the reset rung and GPU fencing beside the run without them, on the same faults.
- False actions: remediations that acted on a node carrying no real fault at the time; drains
  stood down because the condition cleared before the job ended are counted apart (nothing
  disruptive was done).
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import Any

from . import faults as F
from .engine import Simulation

PAPER = {"interruptions": F.LLAMA3_INTERRUPTIONS, "days": F.LLAMA3_DAYS, "nodes": F.LLAMA3_NODES, "ettr": 0.90}
ACTING = ("now", "when_idle")


def _hours(delta: timedelta) -> float:
    return round(delta.total_seconds() / 3600, 2)


def _stats(hours: list[float]) -> dict[str, Any]:
    if not hours:
        return {"count": 0}
    ordered = sorted(hours)
    return {
        "count": len(hours),
        "median_h": round(statistics.median(ordered), 2),
        "mean_h": round(statistics.fmean(ordered), 2),
        "p90_h": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
    }


def build(sim: Simulation, *, wall_seconds: float, policy_about: str = "") -> dict[str, Any]:
    from django.db.models import Count

    from nodes.models import NodeEvent
    from remediation.models import Remediation, RemediationStep
    from repairs.models import RepairTicket, RmaCase

    config, ledger, job = sim.config, sim.ledger, sim.job
    duration = sim.end - config.start
    cluster = {"node__cluster_id": sim.cluster_id}
    real = [f for f in ledger.faults if not f.fault.noise]
    noise = [f for f in ledger.faults if f.fault.noise]

    # --- the job ---------------------------------------------------------------------------------
    expected = PAPER["interruptions"] * config.nodes / PAPER["nodes"] * config.days / PAPER["days"] * config.rate_scale
    causes = Counter(i.cause for i in job.interruptions)
    lost = sum((i.lost for i in job.interruptions), timedelta(0))
    job_report = {
        "nodes": config.job_size,
        "checkpoint_minutes": config.checkpoint_minutes,
        "restart_minutes": config.restart_minutes,
        "interruptions": len(job.interruptions),
        "interruptions_per_day": round(len(job.interruptions) / config.days, 2),
        "mttf_hours": round(duration.total_seconds() / 3600 / len(job.interruptions), 2) if job.interruptions else None,
        "by_cause": {
            (F.BY_KEY[k].component if k in F.BY_KEY else "evicted by Nodewarden"): n for k, n in causes.most_common()
        },
        "evicted_by_nodewarden": causes.get("evicted", 0),
        "lost_work_hours": _hours(lost),
        "restarting_hours": _hours(job.restarting),
        "waiting_for_nodes_hours": _hours(job.waited),
        "kept_hours": _hours(job.kept),
        "ettr": round(job.ettr(duration), 4),
        "paper": {
            "interruptions_scaled": round(expected, 1),
            "ettr_above": PAPER["ettr"],
            "source": "Llama 3 (arXiv 2407.21783) 3.3.4: 419 unexpected interruptions in 54 days on "
            "16,384 H100 (2,048 nodes); effective training time above 90%",
        },
    }

    # --- MTTR by cause: fault -> back in production -------------------------------------------------
    back: dict[str, list[datetime]] = defaultdict(list)
    for host, at in (
        NodeEvent.objects.filter(kind="transition", target_state="production", **cluster)
        .order_by("created")
        .values_list("hostname", "created")
    ):
        back[host].append(at)
    left: dict[str, list[datetime]] = defaultdict(list)  # taken out by Nodewarden itself (not by a person)
    for host, at in (
        NodeEvent.objects.filter(kind="transition", source_state="production", actor_kind="system", **cluster)
        .order_by("created")
        .values_list("hostname", "created")
    ):
        left[host].append(at)
    repaired: dict[str, list[float]] = defaultdict(list)
    never_out: Counter[str] = Counter()
    still_out: Counter[str] = Counter()
    fault_hours: dict[int, float] = {}  # fault id -> hours from the fault to the node back in production
    for fault in real:
        if not fault.cure and fault.fault.signature == F.NONE:
            continue  # nothing wrong with the node: the job restarts, the node stays
        outs = left.get(fault.host, [])
        i = bisect.bisect_left(outs, fault.at - timedelta(minutes=1))
        # A take-out after the fault was cured (by a technician a person called, say) is a later
        # fault's: this one Nodewarden never took out.
        if i == len(outs) or (fault.cured_at is not None and outs[i] > fault.cured_at):
            never_out[fault.fault.key] += 1
            continue
        backs = back.get(fault.host, [])
        j = bisect.bisect_left(backs, outs[i])
        if j == len(backs):
            still_out[fault.fault.key] += 1
            continue
        repaired[fault.fault.key].append((backs[j] - fault.at).total_seconds() / 3600)
        fault_hours[fault.id] = repaired[fault.fault.key][-1]
    mttr = {F.BY_KEY[k].component: _stats(v) for k, v in sorted(repaired.items(), key=lambda kv: -len(kv[1]))}
    everything = [h for v in repaired.values() for h in v]

    # --- actions ---------------------------------------------------------------------------------------
    steps = RemediationStep.objects.filter(remediation__node__cluster_id=sim.cluster_id)
    by_rung: dict[str, dict[str, int]] = defaultdict(dict)
    for rung, status, n in steps.values_list("rung", "status").annotate(n=Count("id")).order_by("rung"):
        by_rung[rung][status] = n
    remediations = Remediation.objects.filter(**cluster)
    outcomes = dict(remediations.values_list("status").annotate(n=Count("id")).values_list("status", "n"))

    # --- false actions: acted on a node with no real fault at the time -------------------------------------
    windows: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for fault in real:
        if fault.fault.signature != F.NONE or fault.cure:
            windows[fault.host].append((fault.at, (fault.cured_at or sim.end) + timedelta(minutes=30)))
    false_by_rule: Counter[str] = Counter()
    acted = 0
    stood_down = remediations.filter(status="cleared").count()
    for host, created, rule in (
        remediations.filter(urgency__in=ACTING)
        .exclude(status="cleared")
        .values_list("node__hostname", "created", "finding__rule")
    ):
        acted += 1
        if not any(start <= created <= end for start, end in windows.get(host, [])):
            false_by_rule[rule or "(no finding)"] += 1

    # --- nodes per state over time -------------------------------------------------------------------------
    per_day: dict[int, list[dict[str, int]]] = defaultdict(list)
    for at, counts in ledger.states:
        per_day[(at - config.start).days].append(counts)
    states = sorted({s for _, counts in ledger.states for s in counts})
    daily = [
        {"day": day, **{s: round(statistics.fmean(c.get(s, 0) for c in samples), 1) for s in states}}
        for day, samples in sorted(per_day.items())
    ]
    out_of_production = [config.nodes - counts.get("production", 0) for _, counts in ledger.states]

    return {
        "config": {
            "nodes": config.nodes,
            "gpus": config.nodes * 8,
            "days": config.days,
            "seed": config.seed,
            "policy": config.policy,
            "policy_about": policy_about,
            "rate_scale": config.rate_scale,
            "noise_scale": config.noise_scale,
            "hardware_profile": "HGX H100 8-GPU (simulated)",
            "tick_minutes": config.tick_minutes,
            "report_hours": config.report_hours,
            "heartbeat_minutes": config.heartbeat_minutes,
        },
        "faults": {
            "injected": len(real),
            "noise_signals": len(noise),
            "by_class": dict(Counter(F.BY_KEY[f.fault.key].component for f in real).most_common()),
            "noise_by_class": dict(Counter(F.BY_KEY[f.fault.key].component for f in noise).most_common()),
            "fell_on_a_node_already_down": sum(ledger.skipped.values()),
            "cured_by": dict(Counter(by.split(" ")[-1] for _, _, by, _ in ledger.cures).most_common()),
        },
        "job": job_report,
        "mttr": {
            "all": _stats(everything),
            "by_cause": mttr,
            "never_taken_out": dict(never_out),
            "still_out_at_end": dict(still_out),
        },
        "actions": {
            "steps_by_rung": dict(by_rung),
            "remediations": outcomes,
            "acting_remediations": acted,
            "repair_tickets": RepairTicket.objects.filter(**cluster).count(),
            "rma_cases": RmaCase.objects.filter(**cluster).count(),
            "repairs_resolved": ledger.repairs_done,
            "rmas_closed": ledger.rmas_done,
        },
        "manual": [{"host": h, "fault": F.BY_KEY[k].component, "at": at.isoformat()} for h, k, at in ledger.manual],
        "false_actions": {
            "count": sum(false_by_rule.values()),
            "by_rule": dict(false_by_rule.most_common()),
            "stood_down": stood_down,
            "share_of_acting": round(sum(false_by_rule.values()) / acted, 3) if acted else 0.0,
        },
        "states": {
            "daily_mean": daily,
            "out_of_production_mean": round(statistics.fmean(out_of_production), 1) if out_of_production else 0,
            "out_of_production_max": max(out_of_production, default=0),
            "hourly": [{"at": at.isoformat(), **counts} for at, counts in ledger.states],
        },
        "audit": _audit(sim),
        "gpu_rungs": _lost(sim, fault_hours),
        "run": {
            "wall_seconds": round(wall_seconds, 1),
            "speedup": round(duration.total_seconds() / wall_seconds) if wall_seconds else None,
            "ticks": ledger.ticks,
            "ticks_by_work": dict(ledger.busy.most_common()),
            "agent_requests": sim.api.requests,
            "agent_reports": sim.api.reports,
            "agent_errors": sim.api.errors[:20],
            "agent_refused": sim.api.refused,
            "task_errors": ledger.task_errors[:20],
            "phase_seconds": {k: round(v, 1) for k, v in ledger.phase_seconds.most_common()},
        },
    }


CURED_BY = ("gpu_reset", "reboot", "power_cycle", "reimage", "technician", "RMA")  # Simulation._cure's "by", last word


def _out_hours(sim: Simulation) -> tuple[float, float]:
    """Node-hours out of production and in the remediating state, exact: integrated over every node's
    state transitions (the history rows), not over hourly samples, which cannot see the minutes a
    GPU reset saves against a host restart."""
    from nodes.models import NodeEvent

    start, end = sim.config.start, sim.end
    out = remediating = 0.0
    since: dict[str, dict[str, datetime]] = defaultdict(dict)  # host -> {"out"/"remediating": since when}
    rows = (
        NodeEvent.objects.filter(kind="transition", node__cluster_id=sim.cluster_id, created__lte=end)
        .order_by("created", "pk")
        .values_list("hostname", "target_state", "created")
    )
    for host, target, at in rows.iterator():
        at = max(at, start)
        opened = since[host]
        for key, inside in (("out", target != "production"), ("remediating", target == "remediating")):
            if inside and key not in opened:
                opened[key] = at
            elif not inside and key in opened:
                hours = (at - opened.pop(key)).total_seconds() / 3600
                out, remediating = (out + hours, remediating) if key == "out" else (out, remediating + hours)
    for opened in since.values():
        for key, at in opened.items():
            hours = (end - at).total_seconds() / 3600
            out, remediating = (out + hours, remediating) if key == "out" else (out, remediating + hours)
    return out, remediating


def _lost(sim: Simulation, fault_hours: dict[int, float]) -> dict[str, Any]:
    """Capacity lost: node-hours out of production and in remediation (exact, from the transitions),
    GPU-hours (8 per node out, plus fenced GPUs on nodes still in production, from the hourly
    samples); the GPU-level rungs' own counts; and the faults a GPU reset is the least that cures
    (HBM, SRAM, some GSP): what cured them and how long each node was out."""
    ledger = sim.ledger
    out, remediating = _out_hours(sim)
    fenced = 0.0
    samples = ledger.states
    for i, (at, _counts) in enumerate(samples[:-1]):
        hours = (samples[i + 1][0] - at).total_seconds() / 3600
        fenced += (ledger.fenced_gpus[i] if i < len(ledger.fenced_gpus) else 0) * hours
    resets = Counter(outcome for _, _, outcome, _ in ledger.resets)
    curable = [f for f in ledger.faults if f.cure == F.RESET]
    cured = Counter(f.cured_by.split(" ")[-1] if f.cured_by else "not cured" for f in curable)
    return {
        "gpu_reset_setting": sim.config.gpu_rungs,
        "node_hours_out_of_production": round(out, 2),
        "node_hours_in_remediation": round(remediating, 2),
        "gpu_hours_lost": round(out * 8 + fenced, 1),
        "fenced_gpu_hours": round(fenced, 1),
        "resets_done": resets.get("succeeded", 0),
        "resets_failed": sum(resets.values()) - resets.get("succeeded", 0),
        "resets_by_outcome": dict(resets.most_common()),
        "gpus_fenced": ledger.fences,
        "gpus_unfenced": ledger.unfences,
        "agent_commands": dict(ledger.commands.most_common()),
        "faults_drawn": len(ledger.drawn),
        "reset_curable": {
            "faults": len(curable),
            "cured_by": {by: cured.get(by, 0) for by in CURED_BY} | dict(cured),
            "out_hours": _stats([fault_hours[f.id] for f in curable if f.id in fault_hours]),
            "node_hours_out": round(sum(fault_hours.get(f.id, 0.0) for f in curable), 2),
        },
    }


GPU_RUNG_ROWS = (
    ("faults drawn (same seed: same faults)", ("gpu_rungs", "faults_drawn")),
    ("effective training time ratio", ("job", "ettr")),
    ("job interruptions", ("job", "interruptions")),
    ("  of which evicted by Nodewarden", ("job", "evicted_by_nodewarden")),
    ("node-hours out of production", ("gpu_rungs", "node_hours_out_of_production")),
    ("node-hours in remediation", ("gpu_rungs", "node_hours_in_remediation")),
    ("GPU-hours lost (8 a node out + fenced)", ("gpu_rungs", "gpu_hours_lost")),
    ("  of which fenced GPU-hours", ("gpu_rungs", "fenced_gpu_hours")),
    ("GPU resets done", ("gpu_rungs", "resets_done")),
    ("GPU resets failed", ("gpu_rungs", "resets_failed")),
    ("GPUs fenced", ("gpu_rungs", "gpus_fenced")),
    ("MTTR all causes, median hours", ("mttr", "all", "median_h")),
    ("faults a GPU reset cures (HBM, SRAM, some GSP)", ("gpu_rungs", "reset_curable", "faults")),
    ("  cured by a GPU reset", ("gpu_rungs", "reset_curable", "cured_by", "gpu_reset")),
    ("  cured by a reboot", ("gpu_rungs", "reset_curable", "cured_by", "reboot")),
    ("  cured by a technician (a person took it out)", ("gpu_rungs", "reset_curable", "cured_by", "technician")),
    ("  fault -> back in production, mean hours", ("gpu_rungs", "reset_curable", "out_hours", "mean_h")),
    ("  their node-hours out of production", ("gpu_rungs", "reset_curable", "node_hours_out")),
)


def _pick(report: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = report
    for key in path:
        value = (value or {}).get(key)
    return value


def render_gpu_rungs(with_rungs: dict[str, Any], without: dict[str, Any]) -> str:
    """The reset rung and GPU fencing on and off, on the same fleet and faults, and the difference."""
    c = with_rungs["config"]
    out = [
        (
            f"GPU-level remediation (reset rung, GPU fencing) on and off, same fleet and faults "
            f"({c['nodes']:,} nodes, {c['days']:g} days, seed {c['seed']}, policy {c['policy']!r}):"
        ),
        "",
        _line("", "with", "without", "difference"),
    ]
    for label, path in GPU_RUNG_ROWS:
        a, b = _pick(with_rungs, path), _pick(without, path)
        diff = round(a - b, 4) if isinstance(a, int | float) and isinstance(b, int | float) else None
        out.append(_line(label, a, b, diff))
    return "\n".join(out)


def _audit(sim: Simulation) -> dict[str, Any]:
    """The fleet auditor's findings over the run (goal: none): distinct (node, invariant) breaches,
    breaches summed over the hourly runs, those left at the end, and the first example of each."""
    ledger = sim.ledger
    distinct = Counter(invariant for _, invariant in ledger.breached)
    examples: dict[str, Any] = {}
    for (_host, invariant), (at, breach) in sorted(ledger.breached.items(), key=lambda kv: kv[1][0]):
        examples.setdefault(
            invariant,
            {"at": at.isoformat(), "day": round((at - sim.config.start).total_seconds() / 86400, 2), **breach},
        )
    return {
        "runs": ledger.audits,
        "distinct": sum(distinct.values()),
        "by_invariant": dict(distinct.most_common()),
        "run_breaches_by_invariant": {k: v for k, v in ledger.breaches.most_common() if v},
        "at_end": ledger.breaches_at_end,
        "examples": examples,
    }


def breaches_line(report: dict[str, Any]) -> str:
    """One line: the auditor's breaches by invariant (distinct node and invariant; goal 0)."""
    audit = report.get("audit") or {}
    by = ", ".join(f"{k} {v}" for k, v in audit.get("by_invariant", {}).items())
    return f"breaches (fleet auditor, {audit.get('runs', 0)} runs; goal 0): {audit.get('distinct', 0)}" + (
        f" ({by}); the last run found {audit.get('at_end') or 0}" if by else ""
    )


# --- text ---------------------------------------------------------------------------------------------------
def _line(label: str, *values: Any, width: int = 44) -> str:
    return f"  {label:<{width}}" + "".join(f"{_fmt(v):>22}" for v in values)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def headline(report: dict[str, Any]) -> list[tuple[str, Any]]:
    job, mttr, actions = report["job"], report["mttr"], report["actions"]
    steps = actions["steps_by_rung"]
    rows = [
        ("faults injected (noise signals)", f"{report['faults']['injected']} ({report['faults']['noise_signals']})"),
        ("job interruptions (paper, scaled)", f"{job['interruptions']} ({job['paper']['interruptions_scaled']})"),
        ("  of which evicted by Nodewarden", job["evicted_by_nodewarden"]),
        ("interruptions per day", job["interruptions_per_day"]),
        ("job MTTF, hours", job["mttf_hours"]),
        ("effective training time ratio", job["ettr"]),
        ("work lost to rollbacks, hours", job["lost_work_hours"]),
        ("waiting for enough nodes, hours", job["waiting_for_nodes_hours"]),
        ("MTTR all causes, median hours", mttr["all"].get("median_h")),
        ("MTTR all causes, p90 hours", mttr["all"].get("p90_h")),
        ("faults Nodewarden never took out (a person did)", sum(mttr["never_taken_out"].values())),
        ("remediations that acted", actions["acting_remediations"]),
        ("manual interventions (paper: 3 in 54 days)", len(report["manual"])),
        (
            "false actions (share)",
            f"{report['false_actions']['count']} ({report['false_actions']['share_of_acting']:.0%})",
        ),
        ("drains stood down (cleared before job end)", report["false_actions"]["stood_down"]),
        ("audit breaches, distinct node+invariant (goal 0)", (report.get("audit") or {}).get("distinct", 0)),
    ]
    for rung in ("gpu_reset", "reboot", "power_cycle", "reimage", "repair", "rma"):
        done = steps.get(rung, {})
        rows.append((f"rung {rung}: passed / failed", f"{done.get('passed', 0)} / {done.get('failed', 0)}"))
    rows += [
        ("repair tickets / RMA cases", f"{actions['repair_tickets']} / {actions['rma_cases']}"),
        (
            "nodes out of production, mean / max",
            f"{report['states']['out_of_production_mean']} / {report['states']['out_of_production_max']}",
        ),
        ("wall seconds (simulated/wall)", f"{report['run']['wall_seconds']} ({report['run']['speedup']}x)"),
    ]
    return rows


def render(report: dict[str, Any]) -> str:
    c, job, mttr = report["config"], report["job"], report["mttr"]
    out = [
        (
            f"Fleet simulation: {c['nodes']:,} nodes ({c['gpus']:,} GPUs), {c['days']:g} days, policy "
            f"{c['policy']!r} ({c['policy_about']}), rates x{c['rate_scale']:g}, seed {c['seed']}"
        ),
        "",
    ]
    out += [_line(label, value) for label, value in headline(report)]
    out += ["", "Job interruptions by cause:"]
    out += [_line(cause, n) for cause, n in job["by_cause"].items()]
    out += [
        "",
        (
            f"Time to repair by cause (fault -> back in production), hours:{'':<4}"
            f"{'count':>8}{'median':>9}{'mean':>9}{'p90':>9}"
        ),
    ]
    for cause, s in mttr["by_cause"].items():
        out.append(
            f"  {cause:<44}{s['count']:>8}{s.get('median_h', 0):>9.1f}{s.get('mean_h', 0):>9.1f}"
            f"{s.get('p90_h', 0):>9.1f}"
        )
    if mttr["never_taken_out"]:
        out.append(f"  never taken out of production: {mttr['never_taken_out']}")
    if mttr["still_out_at_end"]:
        out.append(f"  still out at the end: {mttr['still_out_at_end']}")
    if report["false_actions"]["by_rule"]:
        out += ["", f"False actions by rule: {report['false_actions']['by_rule']}"]
    daily = report["states"]["daily_mean"]
    if daily:
        states = [s for s in daily[0] if s != "day"]
        out += [
            "",
            "Nodes by state (daily mean of hourly samples; every sample is in the JSON):",
            "  day " + "".join(f"{s[:12]:>13}" for s in states),
        ]
        step = max(1, len(daily) // 12)
        for row in daily[::step]:
            out.append(f"  {row['day']:>3} " + "".join(f"{row.get(s, 0):>13.1f}" for s in states))
    out += ["", breaches_line(report)]
    for invariant, example in (report.get("audit") or {}).get("examples", {}).items():
        out.append(
            f"  e.g. {invariant} on {example['hostname']} at day {example['day']}: Nodewarden believes "
            f"{example['believed']}; the world says {example['world']}"
        )
    errors = report["run"]["agent_errors"] + report["run"]["task_errors"]
    out += [
        "",
        f"Agent API: {report['run']['agent_requests']:,} requests, {report['run']['agent_reports']:,} reports, "
        f"{len(errors)} errors" + (f": {errors[:3]}" if errors else ""),
    ]
    return "\n".join(out)


def render_side_by_side(left: dict[str, Any], right: dict[str, Any]) -> str:
    a, b = dict(headline(left)), dict(headline(right))
    out = [
        (
            f"Two policies on the same fleet and the same faults ({left['config']['nodes']:,} nodes, "
            f"{left['config']['days']:g} days, seed {left['config']['seed']}):"
        ),
        "",
        _line("", left["config"]["policy"], right["config"]["policy"]),
    ]
    out += [_line(label, a[label], b.get(label)) for label in a]
    return "\n".join(out)
