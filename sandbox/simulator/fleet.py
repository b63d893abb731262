"""The simulated fleet's rows: written in bulk once, before the clock starts (a fixture of the
simulation, like the demo's seed), then only ever changed through the services."""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from . import policies
from .engine import CLUSTER, PROFILE, SITE, SimConfig


@transaction.atomic
def build_fleet(config: SimConfig, emulators: list[Any], hostname: Callable[[int], str]) -> tuple[int, list[Any], Any]:
    """Site, cluster, profile, Day 1 spec, re-validation plans, policies and ``config.nodes``
    production nodes with BMCs and agent tokens. Returns (cluster id, [(node id, hostname, token)],
    the simulated technician as an Actor)."""
    from bmc.models import BmcEndpoint
    from fleet.models import Cluster, HardwareProfile, Site
    from health.models import HealthRule
    from health.rules import REGISTRY
    from nodes.choices import NodeState
    from nodes.models import GPU, Node
    from nodes.roles import OPERATORS, ensure_roles
    from nodes.services import Actor
    from telemetry.auth import TOKEN_PREFIX, hash_token
    from telemetry.models import AgentToken
    from validation.choices import Reentry, Stage
    from validation.models import Day1Spec, RevalidationPlan

    if Site.objects.filter(slug=SITE).exists():
        raise RuntimeError(
            "This database already holds a simulated fleet: a simulation runs on a database of "
            "its own (manage.py simulate_fleet makes one per run)."
        )
    site = Site.objects.create(name="Simulated site", slug=SITE)
    cluster = Cluster.objects.create(site=site, name=CLUSTER, scheduler_kind="simulated")
    profile = HardwareProfile.objects.create(
        name=PROFILE,
        gpu_model="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        hca_count=8,
        hca_rate_gbps=400,
        memory_gb=2048,
        firmware_baseline={},
    )
    Day1Spec.objects.create(
        hardware_profile=profile,
        soak_seconds=int(config.soak_minutes * 60),
        burn_in_seconds=600,
        min_tflops_per_gpu=600,
        min_busbw_gbps=300,
        stage_timeout_seconds=3600,
    )
    for reentry in Reentry.values:
        RevalidationPlan.objects.update_or_create(
            reentry=reentry,
            defaults={
                "stages": [Stage.BURN_IN, Stage.FABRIC, Stage.RELIABILITY],
                "note": "fleet simulator: burn-in, the agent's view of the fabric, and a soak",
            },
        )
    # Agents' liveness is applied every heartbeat_minutes here (every 30 s in a real fleet): a node
    # is missing once it has skipped one and a half of those.
    spec = REGISTRY["heartbeat_missing"]
    HealthRule.objects.update_or_create(
        key="heartbeat_missing",
        hardware_profile=None,
        defaults={
            "severity": spec.severity,
            "recommended_action": spec.recommended_action,
            "threshold": config.heartbeat_minutes * 60 * 1.5,
            "description": "fleet simulator: heartbeats applied every heartbeat_minutes",
        },
    )
    HealthRule.objects.create(
        key="heartbeat_missing",
        hardware_profile=profile,
        severity=spec.severity,
        recommended_action=spec.recommended_action,
        threshold=config.heartbeat_minutes * 60 * 1.5,
        description="fleet simulator: heartbeats applied every heartbeat_minutes",
    )
    _, _, rows = policies.load(config.policy)
    policies.install(rows)

    nodes = Node.objects.bulk_create(
        [
            Node(
                hostname=hostname(i),
                serial=f"SIMSN{i:07d}",
                bmc_address="127.0.0.1",
                site=site,
                cluster=cluster,
                hardware_profile=profile,
                state=NodeState.PRODUCTION,
            )
            for i in range(config.nodes)
        ]
    )
    nodes = list(Node.objects.filter(cluster=cluster).order_by("hostname"))
    # The GPU inventory a node's Day 1 would have recorded, with the UUIDs and serials its agent
    # reports (telemetry.testing derives them from hostname and index): findings name these GPUs,
    # and GPU fencing needs them.
    idents = [(node, i, random.Random(f"{node.hostname}/gpu{i}")) for node in nodes for i in range(8)]
    GPU.objects.bulk_create(
        [
            GPU(
                node=node,
                index=i,
                uuid=f"GPU-{uuid.UUID(int=ident.getrandbits(128), version=4)}",
                serial=f"1654{ident.randrange(10**9):09d}",
                model="NVIDIA H100 80GB HBM3",
            )
            for node, i, ident in idents
        ]
    )
    per = config.nodes_per_emulator
    BmcEndpoint.objects.bulk_create(
        [
            BmcEndpoint(
                node=node,
                address=emulators[i // per].url,
                username=emulators[i // per].username,
                password=emulators[i // per].password,
                system_id=emulators[i // per].systems[i % per]["uuid"],
                verify_tls=False,
            )
            for i, node in enumerate(nodes)
        ]
    )
    tokens = [TOKEN_PREFIX + secrets.token_urlsafe(24) for _ in nodes]
    AgentToken.objects.bulk_create(
        [
            AgentToken(node=node, key_hash=hash_token(token), prefix=token[:12])
            for node, token in zip(nodes, tokens, strict=True)
        ]
    )
    ensure_roles()
    technician = get_user_model().objects.create_user("sim-technician")
    technician.groups.add(Group.objects.get(name=OPERATORS))
    return cluster.pk, [(n.pk, n.hostname, t) for n, t in zip(nodes, tokens, strict=True)], Actor(user=technician)
