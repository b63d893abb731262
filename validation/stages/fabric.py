"""Stage 4, fabric and cable check.

First the node agent's view: every InfiniBand port ACTIVE / LinkUp at the profile's
rate, and as many HCAs as the profile expects. Then, where the cabling plan knows the
node's HCAs, the fabric's view: a discovery run made after the stage began (the stage
asks the collector for one) must show no open fabric ticket on the node's ports
(missing, down, miswired, swapped, degraded or flapping): each names the exact ports.
"""

from __future__ import annotations

from datetime import timedelta

from telemetry.models import NodeHealth

from .base import StageContext, Verdict

# Port state does not change because a stage began: any report this fresh will do.
FRESH = timedelta(seconds=90)


def start(ctx: StageContext) -> Verdict | None:
    from fabric.services import plan_covers_node
    from fabric.tasks import request_collection

    if plan_covers_node(ctx.node.pk):
        request_collection()
    return poll(ctx)


def poll(ctx: StageContext) -> Verdict | None:
    verdict = _agent_view(ctx)
    if verdict is None or not verdict.passed:
        return verdict
    return _fabric_view(ctx, verdict)


def _fabric_view(ctx: StageContext, agent: Verdict) -> Verdict | None:
    from fabric.services import last_run, node_fabric_problems, plan_covers_node

    if not plan_covers_node(ctx.node.pk):
        return Verdict(True, f"{agent.summary} (the cabling plan does not list this node's HCAs)", agent.figures)
    run = last_run()
    started = ctx.run.started or ctx.run.created
    if run is None or run.started < started:
        return None  # waiting for a discovery run made after the stage began
    tickets = node_fabric_problems(ctx.node.pk)
    if tickets:
        return Verdict(
            False,
            "Cabling differs from the plan: " + "; ".join(f"ticket #{t.pk} {t.title} ({t.detail})" for t in tickets),
            agent.figures,
            evidence={"tickets": [t.pk for t in tickets], "run": run.pk},
        )
    return Verdict(
        True, f"{agent.summary} Cabled as planned (discovery run {run.pk}).", agent.figures, evidence={"run": run.pk}
    )


def _agent_view(ctx: StageContext) -> Verdict | None:
    health = NodeHealth.objects.filter(node_id=ctx.node.pk, last_received_at__gte=ctx.now - FRESH).first()
    if health is None:
        return None
    profile = ctx.node.hardware_profile
    ports = [p for p in health.ib_ports or [] if (p.get("link_layer") or "InfiniBand") == "InfiniBand"]
    if not profile.hca_count:
        return Verdict(True, f"Profile {profile.name} expects no InfiniBand HCA.")
    problems = []
    for p in ports:
        name = f"{p['device']}/{p['port']}"
        if p.get("state") != "ACTIVE" or p.get("phys_state") not in ("LinkUp", ""):
            problems.append(f"{name} is {p.get('state') or '?'}/{p.get('phys_state') or '?'}")
        elif profile.hca_rate_gbps and (p.get("rate_gbps") or 0) < profile.hca_rate_gbps:
            problems.append(f"{name} at {p.get('rate_gbps') or 0:g} Gb/s, expected {profile.hca_rate_gbps}")
    devices = {p["device"] for p in ports}
    if len(devices) < profile.hca_count:
        problems.append(f"{len(devices)} HCA(s) reported, expected {profile.hca_count}")
    up = sum(1 for p in ports if p.get("state") == "ACTIVE")
    figures = {"ports_active": float(up), "ports": float(len(ports))}
    if problems:
        return Verdict(
            False,
            "InfiniBand ports not ready: " + "; ".join(problems),
            figures=figures,
            evidence={"ports": ports, "problems": problems},
        )
    return Verdict(True, f"{up} InfiniBand port(s) active at {profile.hca_rate_gbps or 'any'} Gb/s.", figures=figures)
