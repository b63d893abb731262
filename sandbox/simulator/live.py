"""The simulator in a live fleet: faults at the published rates, sped up, for the demo to handle.

``keep_failing`` (a Celery task, every minute from beat while NODEWARDEN_DEMO_CHURN is on)
draws the faults of the last minute for the demo's production nodes from the same classes
and rates as the batch simulator (``simulator.faults``: the Llama 3 table), multiplied by
``NODEWARDEN_DEMO_FAULT_SCALE`` (default 300: about one fault every two or three minutes on the
demo's 500 nodes, where a real fleet of that size sees one every 13 hours). Each becomes a
``LiveFault`` row; the demo's agents (``sandbox.demo.telemetry``) put its signature in their
reports, which go through the real ingest, so the real rules, policies, remediation ladder,
BMC emulator and schedulers answer. A fault lasts until what cures it has happened: a rung
far enough up the ladder (seen as the re-validation it starts), or a repair or RMA (seen as
the node coming back from it); noise goes away by itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import agents as A
from . import faults as F
from .models import LiveFault

NOISE_LASTS = {"link_flap": timedelta(minutes=2), "heat_wave": timedelta(minutes=40)}


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: the means here are small (a few per minute at most)."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def inject(
    node_ids: list[int], *, minutes: float, scale: float, rng: random.Random, now: datetime | None = None
) -> list[LiveFault]:
    """Plant the faults ``minutes`` of a fleet of ``node_ids`` would see at ``scale`` x the published rates."""
    now = now or timezone.now()
    busy = set(LiveFault.objects.filter(node_id__in=node_ids, cured_at__isnull=True).values_list("node_id", flat=True))
    free = [n for n in node_ids if n not in busy]
    planted = []
    for fault in F.FAULTS + F.NOISE:
        if fault.signature == F.NONE:
            continue  # a software crash leaves nothing on the node for the demo to show
        for _ in range(_poisson(rng, fault.per_node_day * len(node_ids) * scale * minutes / 1440)):
            if not free:
                break
            node_id = free.pop(rng.randrange(len(free)))
            lasts = NOISE_LASTS.get(fault.key, timedelta(0)) if fault.noise else None
            planted.append(
                LiveFault(
                    node_id=node_id,
                    fault=fault.key,
                    cure=fault.draw_cure(rng),
                    gpu=rng.randrange(8),
                    hca=rng.randrange(8),
                    xid=fault.draw_xid(rng),
                    started=now,
                    ends=now + lasts if lasts is not None else None,
                )
            )
    return LiveFault.objects.bulk_create(planted)


def cure(now: datetime | None = None) -> list[LiveFault]:
    """Cure what the fleet's own history says was done: a rung that reaches far enough (its
    re-validation event names the remediation), a repair or RMA (the node back from it); noise ends."""
    from nodes.models import NodeEvent
    from remediation.models import RemediationStep

    now = now or timezone.now()
    cured = []
    active = list(LiveFault.objects.filter(cured_at__isnull=True))
    for fault in active:
        if fault.ends is not None:
            if fault.ends <= now:
                fault.cured_at, fault.cured_by = fault.ends, "went away"
                cured.append(fault)
            continue
        for event in NodeEvent.objects.filter(
            node_id=fault.node_id, transition="revalidate", created__gte=fault.started
        ).order_by("created"):
            remediation = (event.details or {}).get("remediation")
            if remediation is None:  # back from repair, RMA or triage: a person fixed it
                fault.cured_at, fault.cured_by = event.created, "technician"
                break
            rung = (
                RemediationStep.objects.filter(remediation_id=remediation, acted_at__isnull=False)
                .order_by("-acted_at")
                .values_list("rung", flat=True)
                .first()
            )
            if rung and F.rung_cures(rung, fault.cure):
                fault.cured_at, fault.cured_by = event.created, f"rung {rung}"
                break
        if fault.cured_at is not None:
            cured.append(fault)
    LiveFault.objects.bulk_update(cured, ["cured_at", "cured_by"])
    return cured


def signals_by_node(node_ids: Iterable[int], now: datetime) -> dict[int, list[A.SimFault]]:
    """The live faults each node's agent shows now, as the batch simulator's signals."""
    out: dict[int, list[A.SimFault]] = {}
    for row in LiveFault.objects.filter(node_id__in=list(node_ids), cured_at__isnull=True):
        if row.ends is not None and row.ends <= now:
            continue
        out.setdefault(row.node_id, []).append(
            A.SimFault(
                row.pk,
                F.BY_KEY[row.fault],
                str(row.node_id),
                row.started,
                row.cure,
                gpu=row.gpu,
                hca=row.hca,
                xid=row.xid,
                announced=row.announced,
            )
        )
    return out


def show(
    report: dict[str, Any] | None, signals: list[A.SimFault], now: datetime, *, seq: int = 0
) -> dict[str, Any] | None:
    """The report with the signals' signatures in it; None if one of them silences the host.
    XID lines go out once: the rows are marked announced."""
    if report is None or any(s.fault.signature == F.SILENT for s in signals):
        return None
    node = A.VirtualNode(0, report["hostname"], "", 0, seq=seq)
    for signal in signals:
        was = signal.announced
        A.apply(report, signal, node, now)
        if signal.announced and not was:
            LiveFault.objects.filter(pk=signal.id).update(announced=True)
    return report


@shared_task(name="sandbox.simulator.live.keep_failing")
def keep_failing(seed: int | None = None) -> str:
    """One minute of the demo fleet's faults (a no-op unless NODEWARDEN_DEMO_CHURN is set)."""
    if not settings.NODEWARDEN_DEMO_CHURN:
        return "disabled"
    from nodes.choices import NodeState
    from sandbox.demo.seed import demo_fleet_exists, demo_nodes

    if not demo_fleet_exists():
        return "no demo fleet"
    rng = random.Random(seed)
    with transaction.atomic():
        cured = cure()
        ids = list(demo_nodes().filter(state=NodeState.PRODUCTION).values_list("id", flat=True))
        planted = inject(ids, minutes=1.0, scale=settings.NODEWARDEN_DEMO_FAULT_SCALE, rng=rng)
    return (
        f"{len(planted)} planted"
        + (": " + ", ".join(f"{f.fault} on {f.node_id}" for f in planted) if planted else "")
        + f"; {len(cured)} cured"
    )
