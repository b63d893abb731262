"""Health rule evaluation over a batch of ingested reports.

Contract with telemetry ingest (registered in ``telemetry.consumers`` by ``HealthConfig.ready``):
``telemetry`` calls ``evaluate_reports`` inside the
ingest transaction (in a savepoint opened before evaluation's first statement, if any)
with one ReportContext per newly stored report, in the order the reports were taken.
``previous_*`` hold the node's latest state *before* this report, so rules can take
deltas of cumulative counters. Ingest may pass the node's firing alerts, read with the
node (``OPEN_ALERT_FIELDS``, made Alerts by ``open_alerts_from_values``): a healthy
report is then evaluated without any query.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import F

from telemetry.consumers import ReportContext
from telemetry.store import CompiledRead

from .rules.base import CLEAR, FIRE, GPU

logger = logging.getLogger(__name__)
SHADOW_DEDUPE = timedelta(hours=1)


def evaluate_reports(contexts: list[ReportContext], *, firing: list[Any] | None = None, screened: bool = True) -> None:
    """Run every enabled health rule over the batch (a rule screened out on a report, with
    no open alert on the node, is skipped: see the module's docstring).

    Cost when nothing fires: the rule book (cached) and one query for the batch's open
    alerts, whatever the batch size, or none where the caller passes them as ``firing``
    (every firing Alert of the batch's nodes, with at least ``OPEN_ALERT_FIELDS``).
    Queries happen only where a condition fires, clears or moves inside its hysteresis
    band on an open alert.
    """
    if not contexts:
        return
    book = _rule_book()
    if firing is None:
        open_alerts = _open_alerts({c.node_id for c in contexts})
    else:
        open_alerts = {(a.node_id, a.dedupe_key): a for a in firing}
    for ctx in contexts:
        gpus = _gpu_pairs(ctx)
        open_rules = _rules_open_on(ctx.node_id, open_alerts) if open_alerts else ()
        for spec, cfg, screen in book.plan(ctx.hardware_profile_id):
            if screened and _quiet(screen, spec.key, open_rules, ctx, gpus):
                continue  # it could only clear or hold, and has no alert here to do it to
            for condition in _run_rule(spec, cfg, ctx, gpus):
                # Clear and hold only act on an open alert: with none open (most reports of
                # a healthy fleet) only a firing condition has anything to do.
                if open_alerts or condition.state == FIRE:
                    _apply(condition, spec.key, cfg, ctx, open_alerts)
        _clear_heartbeat(ctx, open_alerts)


def reports_are_quiet(contexts: list[ReportContext], *, firing: list[Any] | None) -> bool:
    """Whether ``evaluate_reports(contexts, firing=firing)`` would do nothing: no open alert
    to clear or hold (``firing`` given and empty) and every rule screened out on every
    report. Sends no statement: ingest asks outside the rules' savepoint, and then skips the
    call and the savepoint (``evaluate_reports.quiet``, telemetry.consumers.quiet_of)."""
    book = _ruleconfig().cached_book() if firing == [] else None
    if book is None:  # open alerts to act on, or the rules not in memory (reading them is evaluation's)
        return False
    try:
        for ctx in contexts:
            gpus = _gpu_pairs(ctx)
            for _spec, _cfg, screen in book.plan(ctx.hardware_profile_id):
                # _quiet() with no open rule, inlined: this runs for every report of a healthy fleet.
                if screen is None or screen(ctx, gpus):
                    return False
    except Exception:  # a report a screen cannot read: evaluation runs the rule, and logs what it makes of it
        return False
    return True


# Ingest asks before it opens the rules' savepoint (telemetry.consumers.quiet_of).
evaluate_reports.quiet = reports_are_quiet  # type: ignore[attr-defined]


def _rule_book() -> Any:
    return _ruleconfig().RuleBook()


def _ruleconfig() -> Any:
    """health.ruleconfig, imported once: this module loads before the models do (an import
    statement in a function costs a lookup in the import machinery on every call)."""
    global _RULECONFIG
    if _RULECONFIG is None:
        from . import ruleconfig

        _RULECONFIG = ruleconfig
    return _RULECONFIG


_RULECONFIG: Any = None


def _gpu_pairs(ctx: ReportContext) -> list[tuple[Any, dict[str, Any]]]:
    """Each GPU reading of the report with its fields as of the previous report (or ``{}``)."""
    previous = ctx.previous_gpus
    return [(gpu, previous.get(gpu.index) or {}) for gpu in ctx.report.gpus]


def _quiet(screen: Any, key: str, open_rules: Any, ctx: ReportContext, gpus: list[tuple[Any, dict[str, Any]]]) -> bool:
    """Whether rule ``key`` may be skipped on this report: it has a screen, no open alert on
    the node, and its screen rules out any fire or write."""
    if screen is None or key in open_rules:
        return False
    try:
        return not screen(ctx, gpus)
    except Exception:  # a report the screen cannot read: the rule runs, and logs what it makes of it
        return False


# What evaluation reads of an open alert, in Alert's field order (Model.from_db wants it;
# a test holds the two together): a literal, as this module loads before the models do.
OPEN_ALERT_FIELDS = ("id", "node_id", "rule", "dedupe_key", "severity", "severity_rank", "last_seen", "clearing_since")


def open_alerts_from_values(rows: list[tuple[Any, ...]]) -> list[Any]:
    """Firing alerts read elsewhere as ``OPEN_ALERT_FIELDS`` values, as deferred Alerts."""
    from .models import Alert

    return [Alert.from_db(DEFAULT_DB_ALIAS, OPEN_ALERT_FIELDS, row) for row in rows]


def _firing(node_ids: Any) -> Any:
    from .choices import AlertState
    from .models import Alert

    return Alert.objects.filter(node_id__in=node_ids, state=AlertState.FIRING)


class _FiringOnOneNode:
    """The ingest's case, one node's batch: the same read as ``_firing(...).only(...)``,
    compiled once (``telemetry.store.CompiledRead``), rows turned into deferred Alerts."""

    def __init__(self) -> None:
        self.read = CompiledRead(lambda node_id: _firing([node_id]).values_list(*OPEN_ALERT_FIELDS))

    def fetch(self, node_id: int) -> list[Any]:
        return open_alerts_from_values(self.read.fetch(node_id))


_firing_on_one_node: _FiringOnOneNode | None = None


def _open_alerts(node_ids: set[int]) -> dict[tuple[int, str], Any]:
    global _firing_on_one_node
    if len(node_ids) == 1:
        _firing_on_one_node = _firing_on_one_node or _FiringOnOneNode()
        alerts = _firing_on_one_node.fetch(*node_ids)
    else:
        alerts = list(_firing(node_ids).only(*OPEN_ALERT_FIELDS))
    return {(a.node_id, a.dedupe_key): a for a in alerts}


def _rules_open_on(node_id: int, open_alerts: dict[tuple[int, str], Any]) -> set[str]:
    """The rules with an open alert on the node (a dedupe key starts with its rule's key)."""
    return {key.split("|", 1)[0] for node, key in open_alerts if node == node_id}


def _run_rule(spec: Any, cfg: Any, ctx: ReportContext, gpus: list[tuple[Any, dict[str, Any]]]) -> list[Any]:
    """The rule's conditions; a rule that raises is logged and skipped, never fails the ingest.
    ``gpus``: ``_gpu_pairs(ctx)``."""
    try:
        if spec.scope == GPU:
            fn = spec.fn
            return [c for gpu, prev in gpus for c in fn(cfg, ctx, gpu, prev)]
        return list(spec.fn(cfg, ctx))
    except Exception:  # a rule bug must not reject a node's telemetry
        logger.exception("health rule %s failed on node %s", spec.key, ctx.node_id)
        return []


def _apply(condition: Any, rule: str, cfg: Any, ctx: ReportContext, open_alerts: dict[tuple[int, str], Any]) -> None:
    from .services import dedupe_key, note_clear, note_not_clear

    key = dedupe_key(rule, condition.gpu_index, condition.subject)
    alert = open_alerts.get((ctx.node_id, key))
    now = ctx.report.collected_at
    if condition.state == FIRE:
        _fire(condition, rule, cfg, ctx, alert, open_alerts, key)
    elif alert is None:
        return
    elif condition.state == CLEAR:
        if note_clear(
            alert,
            now=now,
            clear_after_seconds=cfg.clear_after_seconds,
            reason=f"condition clear for {cfg.clear_after_seconds} s",
        ):
            open_alerts.pop((ctx.node_id, key), None)
    else:
        note_not_clear(alert)


def _fire(
    condition: Any,
    rule: str,
    cfg: Any,
    ctx: ReportContext,
    alert: Any,
    open_alerts: dict[tuple[int, str], Any],
    key: str,
) -> None:
    from .choices import SEVERITY_RANK, Severity
    from .models import Alert
    from .services import is_event_rule, raise_finding

    severity = Severity(condition.severity or cfg.severity)
    observed = condition.observed_at or ctx.report.collected_at
    if cfg.shadow:
        if not _shadow_seen_recently(ctx.node_id, rule, condition, observed):
            raise_finding(ctx.node_id, **_finding_kwargs(condition, rule, cfg, ctx, severity), shadow=True)
        return
    if alert is not None and not is_event_rule(rule) and SEVERITY_RANK[severity] <= alert.severity_rank:
        # Same condition seen again: refresh the alert, no new finding (a hot GPU is one finding a day, not 2,880).
        Alert.objects.filter(pk=alert.pk).update(
            last_seen=observed, occurrences=F("occurrences") + 1, clearing_since=None
        )
        alert.clearing_since = None
        return
    finding = raise_finding(ctx.node_id, **_finding_kwargs(condition, rule, cfg, ctx, severity))
    if finding is not None and finding.alert is not None:
        open_alerts[(ctx.node_id, key)] = finding.alert


def _finding_kwargs(condition: Any, rule: str, cfg: Any, ctx: ReportContext, severity: str) -> dict[str, Any]:
    return {
        "rule": rule,
        "severity": severity,
        "summary": condition.summary,
        "evidence": condition.evidence,
        "gpu_index": condition.gpu_index,
        "subject": condition.subject,
        "xid": condition.xid,
        "recommended_action": condition.recommended_action or cfg.recommended_action,
        "source": ctx.source,
        "observed_at": condition.observed_at or ctx.report.collected_at,
    }


def _shadow_seen_recently(node_id: int, rule: str, condition: Any, observed: datetime) -> bool:
    """A shadow condition rule records one finding per hour, not one per report."""
    from .models import Finding
    from .services import is_event_rule

    if is_event_rule(rule):
        return False
    return Finding.objects.filter(
        node_id=node_id,
        rule=rule,
        shadow=True,
        gpu_index=condition.gpu_index,
        subject=condition.subject,
        observed_at__gt=observed - SHADOW_DEDUPE,
    ).exists()


def _clear_heartbeat(ctx: ReportContext, open_alerts: dict[tuple[int, str], Any]) -> None:
    """A report arrived: the node is reachable again."""
    if not open_alerts:
        return  # nothing open on the batch's nodes (a healthy fleet): skip the lookup
    from .services import HEALTH, dedupe_key, resolve_alert_locked

    alert = open_alerts.pop((ctx.node_id, dedupe_key("heartbeat_missing", None, "")), None)
    if alert is not None:
        from .models import Alert

        locked = Alert.objects.select_for_update().filter(pk=alert.pk, state="firing").first()
        if locked is not None:
            resolve_alert_locked(locked, reason="a report arrived", actor=HEALTH)
