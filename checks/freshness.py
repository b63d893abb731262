"""Idle-time validation: keep production nodes' active checks fresh, and say how fresh the fleet is.

Each hardware profile owes a set of active check kinds, each with a target age (``targets``:
``DEFAULT_TARGETS`` overridden per profile by ``checks.models.FreshnessTarget``). A kind is fresh
on a node when its last *passed* run finished within the target; a node is covered when every
kind its profile owes is fresh (``coverage``).

``keep_checks_fresh`` (beat, ``checks.tasks.keep_checks_fresh``) requests, per cluster, the
stalest due check on production nodes that are idle, through the ordinary road
(``services.request_check``): the agent claims it only while the node is idle, and a production
node is held in its scheduler for the check and given back after (``services.claim_checks_for_agent``).
It never stacks (a node with an open check gets nothing new) and keeps at most
``NODEWARDEN_FRESHNESS_SHARE`` of a cluster's idle nodes under test at once: running a check, or
idle with one queued. A check queued on a node that is busy again holds nothing and takes no
slot; no agent claiming it within ``services.UNCLAIMED_FRESHNESS_MAX_AGE``, it is withdrawn
(``services.withdraw_unclaimed_freshness_checks``) and asked for again when the node is idle.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from fleet.models import Cluster, HardwareProfile
from nodes.choices import ACTIVE_KINDS, NodeState, RunKind, RunStatus
from nodes.models import Node, Run
from nodes.services import Actor
from telemetry.models import NodeHealth

from . import services
from .models import FreshnessTarget

logger = logging.getLogger(__name__)

# What a profile owes when nobody set its targets: a DCGM diag weekly (the broadest test, level 2
# takes ~15 min), the short stress and the NCCL all-reduce every 3 days (quick, and they catch the
# slow GPU and the bad link that a diag misses), the long memory test monthly.
DEFAULT_TARGETS: dict[str, timedelta] = {
    RunKind.DCGM_DIAG: timedelta(days=7),
    RunKind.GPU_STRESS: timedelta(days=3),
    RunKind.NCCL_TEST: timedelta(days=3),
    RunKind.MEMORY_TEST: timedelta(days=30),
    RunKind.TRAINING_STEP: timedelta(days=30),
}
# Nodes per cluster whose scheduler one run of the task asks "is a job allocated here?": each
# question is a scheduler call (squeue, a Kubernetes list); the rest waits for the next run.
PROBE_BATCH = 20
OPEN = (RunStatus.QUEUED, RunStatus.RUNNING)
ACTOR = Actor.system("checks:freshness")


def targets(profile_ids: Iterable[int]) -> dict[int, dict[str, timedelta]]:
    """Each profile's owed kinds and target ages: the defaults, overridden by its rows (one query)."""
    owed = {pk: dict(DEFAULT_TARGETS) for pk in profile_ids}
    for row in FreshnessTarget.objects.filter(profile_id__in=list(owed)).only("profile_id", "kind", "max_age"):
        if row.max_age is None:
            owed[row.profile_id].pop(row.kind, None)
        else:
            owed[row.profile_id][row.kind] = row.max_age
    return owed


@dataclass
class Due:
    """One owed kind on one node that is not fresh: its age (None: never passed) and target."""

    kind: str
    age: timedelta | None
    target: timedelta

    @property
    def staleness(self) -> float:
        """Age over target: 1.5 is half a target overdue; never passed is the stalest of all."""
        return math.inf if self.age is None else self.age / self.target

    def reason(self) -> str:
        passed = "never passed" if self.age is None else f"last passed {_duration(self.age)} ago"
        return f"freshness: {RunKind(self.kind).label} {passed}, target {_duration(self.target)}"


@dataclass
class NodeFreshness:
    """A production node and the owed kinds it is missing, stalest first (empty: covered)."""

    node_id: int
    hostname: str
    cluster: str
    profile: str
    due: list[Due] = field(default_factory=list)
    fleet: str = "fleet"  # the one group of ``coverage(..., "fleet")``

    @property
    def staleness(self) -> float:
        return self.due[0].staleness if self.due else 0.0


def fleet_freshness(now: datetime, *, cluster_id: int | None = None) -> list[NodeFreshness]:
    """Every production node (of one cluster, or all), with what it owes that is not fresh.

    Three queries whatever the fleet's size: the nodes, the profiles' targets, and the last
    passed run per (node, kind) (the run table's (kind, status, finished) index).
    """
    nodes = Node.objects.filter(state=NodeState.PRODUCTION)
    if cluster_id is not None:
        nodes = nodes.filter(cluster_id=cluster_id)
    rows = list(
        nodes.order_by("hostname").values_list(
            "pk", "hostname", "cluster__name", "hardware_profile_id", "hardware_profile__name"
        )
    )
    owed = targets({row[3] for row in rows})
    last = {
        (node_id, kind): finished
        for node_id, kind, finished in Run.objects.filter(
            node__in=nodes, kind__in=ACTIVE_KINDS, status=RunStatus.PASSED, finished__isnull=False
        )
        .values_list("node_id", "kind")
        .annotate(last=Max("finished"))
        .order_by()
    }
    result = []
    for pk, hostname, cluster, profile_id, profile in rows:
        due = []
        for kind, target in owed[profile_id].items():
            finished = last.get((pk, kind))
            age = None if finished is None else max(now - finished, timedelta(0))
            if age is None or age > target:
                due.append(Due(kind, age, target))
        due.sort(key=lambda d: d.staleness, reverse=True)
        result.append(NodeFreshness(pk, hostname, cluster or "", profile, due))
    return result


@dataclass(frozen=True)
class Share:
    """How many production nodes of a group (a cluster, a profile) are covered."""

    name: str
    nodes: int
    fresh: int
    stale_by_kind: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.fresh / self.nodes if self.nodes else 1.0


BY = ("cluster", "profile", "fleet")  # what a coverage is counted by


def coverage(freshness: list[NodeFreshness], by: str) -> list[Share]:
    """The covered share per ``by`` ("cluster", "profile" or "fleet"), with the stale nodes per kind."""
    return _shares(
        (
            (item.cluster, item.profile, 1, 0 if item.due else 1, Counter(d.kind for d in item.due))
            for item in freshness
        ),
        by,
    )


def _shares(groups: Iterable[tuple[str, str, int, int, Counter[str]]], by: str) -> list[Share]:
    """Shares per ``by`` from (cluster, profile, nodes, covered nodes, stale nodes per kind) groups."""
    nodes: Counter[str] = Counter()
    fresh: Counter[str] = Counter()
    stale: dict[str, Counter[str]] = defaultdict(Counter)
    for cluster, profile, count, covered, stale_kinds in groups:
        name = {"cluster": cluster, "profile": profile, "fleet": "fleet"}[by]
        nodes[name] += count
        fresh[name] += covered
        stale[name].update(stale_kinds)
    return [Share(name, nodes[name], fresh[name], dict(stale[name])) for name in sorted(nodes)]


def fleet_coverage(now: datetime) -> dict[str, list[Share]]:
    """``coverage`` of every production node by "cluster", "profile" and "fleet", counted in the database.

    What ``coverage(fleet_freshness(now), by)`` gives, without a row per node in Python (/metrics at
    100,000 nodes took 1.2 s building them). One statement reads each production node once with its
    last passed run of each kind (runs grouped per node, kinds side by side), flags each owed kind
    stale or not, and counts per cluster and profile the nodes, the stale ones per kind and the stale
    ones at all. A kind is stale on a node whose profile owes it when its last passed run finished
    before ``now`` less the profile's target."""
    owed = targets(HardwareProfile.objects.values_list("pk", flat=True))
    kinds = sorted({kind for kinds in owed.values() for kind in kinds})
    if not kinds:  # nothing owed: every production node is covered
        placed = Node.objects.filter(state=NodeState.PRODUCTION).values_list("cluster__name", "hardware_profile__name")
        counted = Counter((cluster or "", profile) for cluster, profile in placed)
        return {by: _shares(((c, p, n, n, Counter()) for (c, p), n in counted.items()), by) for by in BY}
    at = connection.ops.adapt_datetimefield_value
    flags, flag_params = [], []
    for i, kind in enumerate(kinds):
        owing = [(pk, now - target[kind]) for pk, target in owed.items() if kind in target]
        cutoff = "CASE n.hardware_profile_id " + " ".join(["WHEN %s THEN %s"] * len(owing)) + " END"
        flags.append(
            f"CASE WHEN (l.k{i} IS NULL OR l.k{i} < {cutoff}) AND {cutoff} IS NOT NULL THEN 1 ELSE 0 END AS s{i}"
        )
        flag_params += [v for pk, when in owing for v in (pk, at(when))] * 2  # the cutoff is read twice
    last_columns = ", ".join(f"MAX(CASE WHEN kind = %s THEN finished END) AS k{i}" for i in range(len(kinds)))
    node, run = Node._meta.db_table, Run._meta.db_table
    cluster, profile = Cluster._meta.db_table, HardwareProfile._meta.db_table
    any_stale = " + ".join(f"s{i}" for i in range(len(kinds)))
    sums = ", ".join(f"SUM(s{i})" for i in range(len(kinds)))
    sql = (
        f"SELECT cluster, profile, COUNT(*), SUM(CASE WHEN {any_stale} = 0 THEN 1 ELSE 0 END), {sums} FROM ("  # noqa: S608 - the models' tables and constant SQL; values are parameters
        f"SELECT COALESCE(c.name, '') AS cluster, p.name AS profile, {', '.join(flags)} FROM {node} n "
        f"JOIN {profile} p ON p.id = n.hardware_profile_id LEFT JOIN {cluster} c ON c.id = n.cluster_id "
        f"LEFT JOIN (SELECT node_id, {last_columns} FROM {run} WHERE status = %s AND finished IS NOT NULL "
        f"AND kind IN ({', '.join(['%s'] * len(kinds))}) GROUP BY node_id) l ON l.node_id = n.id "
        "WHERE n.state = %s) per_node GROUP BY cluster, profile"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*flag_params, *kinds, RunStatus.PASSED, *kinds, NodeState.PRODUCTION])
        rows = cursor.fetchall()
    groups = [
        (
            name,
            profile_name,
            count,
            int(covered),
            Counter({k: int(n) for k, n in zip(kinds, per_kind, strict=True) if n}),
        )
        for name, profile_name, count, covered, *per_kind in rows
    ]
    return {by: _shares(groups, by) for by in BY}


def keep_checks_fresh(now: datetime | None = None) -> int:
    """Request the stalest due check on idle production nodes of every cluster; returns how many.

    Idempotent: a second run finds the requests open and adds nothing for those nodes.
    """
    now = now or timezone.now()
    share = float(settings.NODEWARDEN_FRESHNESS_SHARE)
    if share <= 0:
        return 0
    return sum(_keep_cluster_fresh(cluster, share, now) for cluster in Cluster.objects.order_by("pk"))


def _keep_cluster_fresh(cluster: Cluster, share: float, now: datetime) -> int:
    """One cluster: how many more nodes may go under test, then the stalest idle ones first."""
    stale = [item for item in fleet_freshness(now, cluster_id=cluster.pk) if item.due]
    if not stale:
        return 0
    production = Node.objects.filter(cluster=cluster, state=NodeState.PRODUCTION)
    open_runs = Run.objects.filter(node__in=production, kind__in=ACTIVE_KINDS, status__in=OPEN)
    has_open = set(open_runs.values_list("node_id", flat=True))
    running = set(open_runs.filter(status=RunStatus.RUNNING).values_list("node_id", flat=True))
    # Idle by the agents' latest reports (one query); the scheduler is asked below, only about the
    # nodes about to be checked. Nodes under test show their check's GPU processes: counted apart.
    fresh_since = now - services.IDLE_REPORT_MAX_AGE
    idle = set(
        NodeHealth.objects.filter(
            node__in=production,
            gpu_compute_processes=0,
            last_report_at__gte=fresh_since,
            last_received_at__gte=fresh_since,
        ).values_list("node_id", flat=True)
    )
    # The share bounds the nodes held from customers: those running a check, and those idle with a
    # queued one (their agent claims it at its next poll). A check queued on a busy node holds
    # nothing and takes no slot; it waits for the node or is withdrawn
    # (``services.UNCLAIMED_FRESHNESS_MAX_AGE``).
    under_test = running | (has_open & idle)
    pool = idle | under_test
    # At least one: a small cluster (4 idle nodes at 25 %) must not go unchecked for ever.
    slots = max(1, math.floor(share * len(pool))) - len(under_test) if pool else 0
    requested = probed = 0
    for item in sorted(stale, key=lambda i: i.staleness, reverse=True):
        if requested >= slots or probed >= PROBE_BATCH:
            break
        if item.node_id in has_open or item.node_id not in idle:
            continue  # never stack; a busy node by its report is not worth a scheduler call
        probed += 1
        requested += _request_if_idle(item, now)
    return requested


def _request_if_idle(item: NodeFreshness, now: datetime) -> int:
    """Ask the node's scheduler (``services.node_is_idle``), then request its stalest due check."""
    node = Node.objects.select_related("cluster").get(pk=item.node_id)
    idle, why = services.node_is_idle(node, now)
    if not idle:
        logger.debug("freshness: %s not idle: %s", item.hostname, why)
        return 0
    due = item.due[0]
    try:
        services.request_check(node.pk, due.kind, actor=ACTOR, reason=due.reason())
    except (services.CheckConflict, ValidationError) as exc:  # requested meanwhile, or left production
        logger.info("freshness: no %s on %s: %s", due.kind, item.hostname, exc)
        return 0
    return 1


def short_age(value: timedelta) -> str:
    """A target as the freshness page shows it: "7 d", "36 h", "45 min"."""
    seconds = value.total_seconds()
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:.0f} d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 60:.0f} min"


def _duration(value: timedelta) -> str:
    """A short human age: "9 days", "3 days", "20 hours", "45 minutes"."""
    seconds = value.total_seconds()
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{max(seconds / 60, 0):.0f} minutes"
