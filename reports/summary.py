"""Reads of the fleet reports: time to recover per cluster, failures by component and cause,
remediations by rung, downtime by attribution. The availability and flow figures are in
``charts`` and ``flows``; Day 1 yield is ``validation.summary.day1_yield``.

Every read is a fixed number of aggregate queries whatever the fleet's size, with row caps
where rows come back to Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from fabric.choices import DiscrepancyKind
from fleet.models import Cluster
from health.models import Finding, XidDefinition
from nodes.models import Node
from remediation.choices import LADDER, Rung, Status
from remediation.models import Remediation
from remediation.summary import duration_text, percentile

from . import outages
from .choices import Attribution, component_of
from .filters import Period

MAX_RECOVERIES = 20_000  # time to recover is read from at most this many recoveries, the newest
TOP_CAUSES = 15
FABRIC_RULE = "ib_fabric"


def _stats(seconds: list[float]) -> dict[str, Any]:
    return figures(len(seconds), percentile(seconds, 50), percentile(seconds, 90))


def figures(count: int, median: float | None, p90: float | None) -> dict[str, Any]:
    return {
        "count": count,
        "median_s": median,
        "p90_s": p90,
        "median": duration_text(median),
        "p90": duration_text(p90),
    }


def mttr(remediations: QuerySet[Remediation], period: Period) -> dict[str, Any]:
    """From the finding to back in production, for remediations that succeeded in the period:
    median and 90th percentile over all and per cluster (the same clock as remediation.summary.mttr)."""
    recoveries = remediations.filter(
        status=Status.SUCCEEDED, finished__gte=period.since, finished__lt=period.until
    ).order_by("-finished")
    if connection.vendor == "postgresql":
        groups = _recovery_stats_in_sql(recoveries)
    else:
        groups = _recovery_stats(
            recoveries.annotate(began=Coalesce("finding__created", "created")).values_list(
                "node__cluster__name", "began", "finished"
            )[:MAX_RECOVERIES]
        )
    overall = groups.pop(None, _stats([]))
    return {
        "overall": overall,
        "capped": overall["count"] == MAX_RECOVERIES,
        "clusters": [{"cluster": name, **stats} for name, stats in sorted(groups.items())],
    }


def _recovery_stats(
    rows: Iterable[tuple[str | None, datetime, datetime | None]],
) -> dict[str | None, dict[str, Any]]:
    """``_stats`` per cluster name ("" for none) and over all (key None) of (cluster, began, finished) rows."""
    overall: list[float] = []
    per_cluster: dict[str, list[float]] = defaultdict(list)
    for cluster, began, finished in rows:
        if finished is None:  # not a recovery; the callers read succeeded ones, which have finished
            continue
        seconds = max((finished - began).total_seconds(), 0.0)
        overall.append(seconds)
        per_cluster[cluster or ""].append(seconds)
    return {None: _stats(overall), **{name: _stats(values) for name, values in per_cluster.items()}}


def _recovery_stats_in_sql(recoveries: QuerySet[Remediation]) -> dict[str | None, dict[str, Any]]:
    """``_recovery_stats`` of the newest ``MAX_RECOVERIES`` by PostgreSQL, in one query that returns a
    row per cluster instead of every recovery: percentile_cont interpolates between the closest ranks
    as ``percentile`` does, and ROLLUP adds the overall row.

    The newest recoveries are picked before any join, from the index (status, finished) alone: it
    holds the node, the finding and the finding's time (copied onto the remediation), so no finding
    is read. A remediation whose finding was deleted counts from its own start, as the join would."""
    sql, params = recoveries.values_list("node_id", "finding_id", "finding_created", "created", "finished")[
        :MAX_RECOVERIES
    ].query.sql_with_params()
    node, cluster = (connection.ops.quote_name(m._meta.db_table) for m in (Node, Cluster))
    began = "COALESCE(CASE WHEN r.finding_id IS NOT NULL THEN r.finding_created END, r.created)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH r (node_id, finding_id, finding_created, created, finished) AS MATERIALIZED ({sql}) "  # noqa: S608 - Django's compiled query (its params apart) and table names
            "SELECT GROUPING(s.cluster), s.cluster, COUNT(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY s.seconds), "
            "percentile_cont(0.9) WITHIN GROUP (ORDER BY s.seconds) FROM ("
            "SELECT COALESCE(c.name, '') AS cluster, "
            f"GREATEST(EXTRACT(EPOCH FROM r.finished - {began}), 0)::float8 AS seconds "
            f"FROM r JOIN {node} n ON n.id = r.node_id LEFT JOIN {cluster} c ON c.id = n.cluster_id"
            ") AS s GROUP BY ROLLUP (s.cluster)",
            params,
        )
        return {
            None if total else name: figures(count, median, p90)
            for total, name, count, median, p90 in cursor.fetchall()
        }


def failure_causes(findings: QuerySet[Finding], period: Period) -> list[dict[str, Any]]:
    """Findings of the period (shadow ones left out) by component and cause: the rule, the XID for
    XID rules, the discrepancy kind for fabric findings. Commonest first, the top ``TOP_CAUSES``."""
    return causes_of(cause_counts(findings.filter(created__gte=period.since, created__lt=period.until)))


def cause_counts(findings: QuerySet[Finding]) -> list[dict[str, Any]]:
    """The findings (shadow ones left out) counted per rule, XID and fabric kind: one query."""
    return [
        dict(row)
        for row in findings.filter(shadow=False)
        .annotate(fabric_kind=KT("evidence__kind"))
        .values("rule", "xid", "fabric_kind")
        .annotate(n=Count("id"))
        .order_by("-n", "rule")
    ]


def causes_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``cause_counts`` rows named and ranked: per component and cause, commonest first, the top
    ``TOP_CAUSES`` (one query for the XIDs' names)."""
    xids = {r["xid"] for r in rows if r["xid"] is not None}
    xid_names = dict(XidDefinition.objects.filter(xid__in=xids).values_list("xid", "name")) if xids else {}
    kinds = dict(DiscrepancyKind.choices)
    causes: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        causes[(component_of(r["rule"]), _cause(r, xid_names, kinds))] += r["n"]
    ordered = sorted(causes.items(), key=lambda item: (-item[1], item[0]))
    return [{"component": component, "cause": cause, "count": n} for (component, cause), n in ordered[:TOP_CAUSES]]


def _cause(row: Mapping[str, Any], xid_names: dict[int, str], kinds: dict[str, str]) -> str:
    if row["xid"] is not None:
        name = xid_names.get(row["xid"])
        return f"XID {row['xid']}" + (f": {name}" if name else "")
    if row["rule"] == FABRIC_RULE:
        return f"Fabric: {kinds.get(row['fabric_kind'] or '', row['fabric_kind'] or 'unknown')}"
    rule: str = row["rule"]
    return rule


def failures_by_component(causes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The causes' counts summed per component, commonest first."""
    totals: dict[str, int] = defaultdict(int)
    for cause in causes:
        totals[cause["component"]] += cause["count"]
    return [{"component": c, "count": n} for c, n in sorted(totals.items(), key=lambda item: (-item[1], item[0]))]


def remediations_by_rung(remediations: QuerySet[Remediation], period: Period) -> list[dict[str, Any]]:
    """Remediations begun in the period by the rung they ended on (or are on), with how many succeeded:
    one query."""
    # COUNT(*) and COUNT(status), not COUNT(id): the index on created holds rung and status but not the id,
    # and then answers alone (an index-only scan; counting ids reads every remediation of the period).
    counts = {
        r["rung"]: r
        for r in remediations.filter(created__gte=period.since, created__lt=period.until)
        .values("rung")
        .annotate(n=Count("*"), ok=Count("status", filter=Q(status=Status.SUCCEEDED)))
        .order_by()
    }
    return [
        {
            "rung": rung,
            "label": Rung(rung).label,
            "count": counts[rung]["n"] if rung in counts else 0,
            "succeeded": counts[rung]["ok"] if rung in counts else 0,
        }
        for rung in LADDER
    ]


def downtime_totals(totals: dict[str, tuple[int, float]]) -> dict[str, Any]:
    """Outages and node-hours per attribution (from ``outages.outage_page``), as ``downtime`` gives them."""
    hours = {a: totals.get(a, (0, 0.0))[1] / 3600 for a in Attribution.values}
    node_hours = sum(hours.values())
    return {
        "totals": [
            {
                "attribution": a,
                "label": Attribution(a).label,
                "outages": totals.get(a, (0, 0.0))[0],
                "hours": round(hours[a], 1),
                "share": round(100 * hours[a] / node_hours, 1) if node_hours else None,
            }
            for a in Attribution.values
        ],
        "clusters": [],
    }


def downtime(scope: outages.Scope, period: Period) -> dict[str, Any]:
    """Node-hours of downtime in the period, provider's and customer's, over all and per cluster."""
    return downtime_of(outages.downtime_by_attribution(scope, period.since, period.until))


def downtime_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``downtime`` of ``outages.downtime_by_attribution`` rows (one query for the clusters' names)."""
    names = dict(
        Cluster.objects.filter(pk__in={r["cluster_id"] for r in rows if r["cluster_id"]}).values_list("pk", "name")
    )
    totals = {a: {"outages": 0, "hours": 0.0} for a in Attribution.values}
    clusters: dict[str, dict[str, dict[str, float]]] = {}
    for r in rows:
        name = names.get(r["cluster_id"], "")
        per = clusters.setdefault(name, {a: {"outages": 0, "hours": 0.0} for a in Attribution.values})
        for bucket in (totals[r["attribution"]], per[r["attribution"]]):
            bucket["outages"] += r["outages"]
            bucket["hours"] += r["seconds"] / 3600
    node_hours = sum(t["hours"] for t in totals.values())
    return {
        "totals": [
            {
                "attribution": a,
                "label": Attribution(a).label,
                "outages": totals[a]["outages"],
                "hours": round(totals[a]["hours"], 1),
                "share": round(100 * totals[a]["hours"] / node_hours, 1) if node_hours else None,
            }
            for a in Attribution.values
        ],
        "clusters": [
            {
                "cluster": name,
                **{a: {"outages": per[a]["outages"], "hours": round(per[a]["hours"], 1)} for a in Attribution.values},
            }
            for name, per in sorted(clusters.items())
        ],
    }
