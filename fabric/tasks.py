"""Celery tasks of the fabric: collection on a schedule, the agents' counters, both idempotent."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

from telemetry.models import NodeHealth

from .choices import RunSource

log = logging.getLogger(__name__)


def collection_enabled() -> bool:
    """NODEWARDEN_FABRIC_COLLECT: this portal host can run infiniband-diags against the fabric."""
    return bool(settings.NODEWARDEN_FABRIC_COLLECT)


def request_collection() -> None:
    """Ask for a discovery run soon (Day 1's fabric check wants a fresh one); no-op without a collector."""
    if collection_enabled():
        transaction.on_commit(lambda: collect_fabric.apply_async(queue="validation"))


@shared_task(ignore_result=True)
def collect_fabric() -> str:
    """Run the diags, record what they saw against the plan (several times a day from beat)."""
    if not collection_enabled():
        return "disabled (NODEWARDEN_FABRIC_COLLECT)"
    from .collector import collect
    from .discovery import seen_from_topology
    from .services import record_run

    outputs = collect(
        timeout=settings.NODEWARDEN_FABRIC_TOOL_TIMEOUT,
        env=settings.NODEWARDEN_FABRIC_TOOL_ENV or None,
    )
    topology, counters = outputs.parse()
    seen, by_port, guids = seen_from_topology(topology, counters)
    run = record_run(seen, by_port or {}, source=RunSource.COLLECTOR, outputs=outputs.texts(), guids=guids)
    return f"run {run.pk}: {run.summary.get('discrepancies', 0)} discrepancies"


@shared_task(ignore_result=True)
def record_agent_counters() -> str:
    """The counters node agents read from sysfs, for the HCA ports the plan knows: a counters-only run."""
    from .models import FabricDevice
    from .services import record_run
    from .validation import Port

    hcas = dict(FabricDevice.objects.filter(in_plan=True, node__isnull=False).values_list("name", "node_id"))
    if not hcas:
        return "no planned HCA on a known node"
    counters = {}
    for _node_id, hostname, ports in NodeHealth.objects.filter(node_id__in=set(hcas.values())).values_list(
        "node_id", "node__hostname", "ib_ports"
    ):
        for port in ports or []:
            name = f"{hostname} {port.get('device')}"
            if name in hcas and port.get("counters"):
                counters[Port(name, int(port.get("port", 1)))] = {k: int(v) for k, v in port["counters"].items()}
    if not counters:
        return "no counters reported"
    run = record_run(None, counters, source=RunSource.AGENTS)
    return f"run {run.pk}: {len(counters)} ports"
