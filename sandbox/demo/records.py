"""The engine's records of a seeded node's life: what health, remediation and repairs would have written.

A node's seeded history (``lives``) says what happened to it; the engine keeps its own records of
the same things, and the pages and reports read those: findings and their alerts (health), a
remediation with its steps and decisions for every finding acted on (remediation), technician
tickets and vendor cases (repairs). ``engine_records`` reads one node's rows and builds those
records the way the services would have (the same statuses, actors and order), so the seeded
fleet agrees with itself: a node in trouble has a firing alert and an open remediation, a node in
repair an open ticket, a node in RMA an open case, and every return to production after a rung has
the succeeded remediation that the reports count as a recovery.

Pure generation (unsaved model instances); ``seed.build_demo_fleet`` writes them in bulk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from health.choices import SEVERITY_RANK, AlertState, RecommendedAction, Severity
from health.models import Alert, Finding
from nodes.choices import EventKind, NodeState, RunStatus
from nodes.models import Node, Run
from remediation.choices import Rung, Status, StepStatus, Urgency
from remediation.models import Remediation, RemediationStep
from repairs.choices import RmaOutcome, RmaState, TicketState
from repairs.models import RepairTicket, RmaCase
from validation.choices import BY_STATE

from .catalog import CAUSE_RULES, CAUSES, HEALTH, REMEDIATOR
from .lives import _Life, _Row

BY_KEY = {c.key: c for c in CAUSES}
RECOMMENDED = {
    Rung.GPU_RESET: RecommendedAction.RESET_GPU,
    Rung.REBOOT: RecommendedAction.REBOOT,
    Rung.POWER_CYCLE: RecommendedAction.POWER_CYCLE,
    Rung.REPAIR: RecommendedAction.INSPECT,
    Rung.RMA: RecommendedAction.RMA,
}
VENDOR = "NVIDIA"


@dataclass
class Paper:
    """A ticket or case while its story is read: its state is only known at the end, and the
    models' state fields may not be assigned once set (django-fsm's protected fields)."""

    model: type[RepairTicket] | type[RmaCase]
    state: str
    fields: dict[str, Any]
    remediation: Remediation | None = None
    record: Any = None

    @property
    def pk(self) -> int:
        return self.record.pk

    def build(self) -> RepairTicket | RmaCase:
        if self.remediation is not None:
            self.fields |= {"remediation_id": self.remediation.pk, "finding_id": self.remediation.finding_id}
        self.record = self.model(state=self.state, **self.fields)
        return self.record


@dataclass
class Records:
    """One node's (or the fleet's) engine records, unsaved, and the history rows that name them."""

    alerts: list[Alert] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    remediations: list[Remediation] = field(default_factory=list)
    steps: list[RemediationStep] = field(default_factory=list)
    tickets: list[Paper] = field(default_factory=list)
    cases: list[Paper] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)  # the Day 1 stages' runs that ended
    # (row, details key, record): once saved, the record's id goes into the row's details.
    names: list[tuple[_Row, str, Any]] = field(default_factory=list)
    finding_rows: list[tuple[_Row, Finding]] = field(default_factory=list)

    def extend(self, other: Records) -> None:
        for name in (
            "alerts",
            "findings",
            "remediations",
            "steps",
            "tickets",
            "cases",
            "runs",
            "names",
            "finding_rows",
        ):
            getattr(self, name).extend(getattr(other, name))


class _Blank(dict):  # type: ignore[type-arg]
    """A format mapping in which a detail the row lacks reads as empty."""

    def __missing__(self, key: str) -> str:
        return ""


# remediation.safety's words for a disruptive rung held back (a seeded node waiting in triage).
WAITING_IN_TRIAGE = "disruptive rung outside a maintenance window"


class _Incident:
    """One finding's records as they stand after the rows read so far."""

    def __init__(self, node: Node, row: _Row, out: Records) -> None:
        self.node, self.out = node, out
        self.cause = BY_KEY[row.details["cause"]]
        rule, subject = CAUSE_RULES[self.cause.key]
        # Every detail the seeded life wrote for the cause fills its subject (hca, psu, dimm, nvme, ...).
        subject = subject.format_map(_Blank(row.details))
        severity = Severity.CATASTROPHIC if self.cause.cordon else Severity.DEGRADED
        self.rungs = [] if self.cause.to_rma else list(self.cause.rungs)
        first = Rung.RMA if self.cause.to_rma else (self.rungs[0] if self.rungs else Rung.REPAIR)
        gpu = row.details.get("gpu_index")
        self.alert = Alert(
            node=node,
            gpu_index=gpu,
            rule=rule,
            subject=subject,
            dedupe_key=f"{rule}|{'-' if gpu is None else gpu}|{subject}",
            severity=severity,
            severity_rank=SEVERITY_RANK[severity],
            recommended_action=RECOMMENDED[first],
            summary=row.reason,
            state=AlertState.FIRING,
            first_seen=row.at,
            last_seen=row.at,
        )
        self.finding = Finding(
            node=node,
            hostname=node.hostname,
            gpu_index=gpu,
            rule=rule,
            xid=row.details.get("xid"),
            severity=severity,
            recommended_action=RECOMMENDED[first],
            summary=row.reason,
            evidence={"detector": row.details.get("detector", "")},
            source="agent",
            subject=subject,
            observed_at=row.at,
            created=row.at,
            actor_name=HEALTH,
            alert=self.alert,
        )
        out.alerts.append(self.alert)
        out.findings.append(self.finding)
        out.finding_rows.append((row, self.finding))
        self.rem: Remediation | None = None
        self.step: RemediationStep | None = None
        self.ticket: Paper | None = None
        self.case: Paper | None = None
        self.first = first

    def decide(self, at: datetime, what: str, who: str = REMEDIATOR) -> None:
        assert self.rem is not None
        self.rem.decisions.append({"at": at.isoformat(), "what": what, "who": who})
        self.rem.updated = at

    def take_out(self, row: _Row, urgency: str) -> None:
        """consider_finding -> admit -> cordon (act now) or drain (when idle)."""
        self.rem = Remediation(
            node=self.node,
            finding=self.finding,
            finding_created=self.finding.created,
            urgency=urgency,
            rung=self.first,
            created=self.finding.created,
            status=Status.RUNNING if urgency == Urgency.NOW else Status.DRAINING,
            decisions=[],
        )
        self.decide(
            self.finding.created,
            f"{self.finding.summary} -> default for {self.finding.severity} findings; "
            f"{Urgency(urgency).label.lower()}; first rung {Rung(self.first).label.lower()}",
        )
        if urgency == Urgency.WHEN_IDLE:
            self.decide(row.at, "draining: the node leaves production when its current job ends")
        self.out.remediations.append(self.rem)
        self.name(row)

    def name(self, row: _Row) -> None:
        if self.rem is not None:
            self.out.names.append((row, "remediation", self.rem))

    def wait_in_triage(self, at: datetime) -> None:
        """The life ends in triage with no rung running: the engine starts a rung at once on a node in
        triage (``remediation.services.start_rung``), so one that sits there waits queued, as
        ``admit`` leaves it (the auditor's live-remediation rule: never drained or running with no
        step for hours). The reconciler admits it once the demo runs."""
        if self.rem is None or not self.rem.is_open or (self.step is not None and self.step.status == "running"):
            return
        self.rem.status, self.rem.queued_reason = Status.QUEUED, WAITING_IN_TRIAGE
        self.decide(at, f"queued: {WAITING_IN_TRIAGE}")

    def resolve_alert(self, at: datetime, reason: str) -> None:
        self.alert.state, self.alert.resolved_at, self.alert.resolved_reason = AlertState.RESOLVED, at, reason
        self.alert.resolved_by = HEALTH

    def finish(self, status: str, at: datetime, what: str, who: str = REMEDIATOR) -> None:
        assert self.rem is not None
        self.rem.status, self.rem.finished = status, at
        self.decide(at, what, who)

    def open_ticket(self, row: _Row, by: str) -> None:
        handed_off = self.rem if self.rem is not None and self.rem.status == Status.HANDED_OFF else None
        self.ticket = _ticket(self.node, row, by, self.finding.subject or self.finding.rule, handed_off)
        self.out.tickets.append(self.ticket)
        self.out.names.append((row, "repair_ticket", self.ticket))

    def open_case(self, row: _Row, by: str, serial: str) -> None:
        self.case = Paper(
            RmaCase,
            RmaState.OPENED,
            {
                "node": self.node,
                "hostname": self.node.hostname,
                "vendor": VENDOR,
                "part": row.reason.split(": replace ", 1)[-1][:200],
                "failed_serial": serial,
                "vendor_case_number": row.details.get("rma", ""),
                "opened_by_name": by,
                "created": row.at,
            },
        )
        self.out.cases.append(self.case)
        self.out.names.append((row, "rma_case", self.case))


def _ticket(node: Node, row: _Row, by: str, component: str, rem: Remediation | None) -> Paper:
    return Paper(
        RepairTicket,
        TicketState.OPEN,
        {
            "node": node,
            "hostname": node.hostname,
            "component": component[:200],
            "what": row.reason,
            "site": node.site.slug,
            "rack": node.rack.name if node.rack else "",
            "rack_unit": node.rack_unit,
            "opened_by_name": by,
            "created": row.at,
        },
        remediation=rem,
    )


def engine_records(node: Node, life: _Life, gpu_serials: list[str], now: datetime) -> Records:
    """The findings, alerts, remediations, steps, tickets and cases behind one node's rows."""
    out = Records()
    inc: _Incident | None = None
    day1_ticket: Paper | None = None
    stage_since: datetime | None = None  # when the node entered the Day 1 stage it is in
    for row in life.rows:
        if row.kind == EventKind.TRANSITION:
            if row.source in BY_STATE and stage_since is not None:
                out.runs.append(_stage_run(node, row, stage_since))
            stage_since = row.at if row.target in BY_STATE else None
        if row.kind == EventKind.FINDING:
            inc = _Incident(node, row, out)
            continue
        if row.kind == EventKind.NOTE and "incident" in row.details:
            inc = None  # an operator's planned maintenance: no finding, no remediation
            continue
        if row.kind != EventKind.TRANSITION:
            continue
        verb, at = row.transition, row.at
        if inc is None:  # Day 1 failures: validation's own finding, a person opens the ticket
            if verb == "send_to_repair":
                day1_ticket = _ticket(node, row, row.actor, row.reason.split(": ", 1)[-1], None)
                out.tickets.append(day1_ticket)
                out.names.append((row, "repair_ticket", day1_ticket))
            elif verb == "revalidate" and day1_ticket is not None:
                _resolve(day1_ticket, at)
                out.names.append((row, "repair_ticket", day1_ticket))
                day1_ticket = None
            continue
        if inc.rem is not None and inc.rem.is_open and verb not in ("send_to_repair", "send_to_rma"):
            inc.name(row)  # the engine names its remediation on the rows of the moves it makes
        if verb == "cordon":
            inc.take_out(row, Urgency.NOW)
        elif verb == "request_drain":
            inc.take_out(row, Urgency.WHEN_IDLE)
        elif verb == "cancel_drain":
            inc.resolve_alert(at, "condition cleared")
            inc.finish(
                Status.CLEARED, at, f"{inc.finding.summary} cleared by itself before the job ended: standing down"
            )
            inc = None
        elif verb == "complete_drain":
            inc.decide(at, "drained: the rung starts")
        elif verb == "start_remediation" and inc.rem is not None:
            rung = row.details.get("action", inc.rem.rung)
            inc.rem.rung, inc.rem.status = rung, Status.RUNNING
            inc.step = RemediationStep(
                remediation=inc.rem,
                rung=rung,
                status=StepStatus.RUNNING,
                started=at,
                last_activity=at,
                deadline=max(at, now) + timedelta(minutes=15),
            )
            out.steps.append(inc.step)
            inc.decide(at, f"{Rung(rung).label.lower()} started")
        elif verb in ("revalidate", "fail_remediation") and inc.step is not None and inc.step.status == "running":
            passed = verb == "revalidate"  # the action done: the step verifies until re-validation says
            inc.step.status = StepStatus.VERIFYING if passed else StepStatus.FAILED
            inc.step.deadline = at
            inc.step.acted_at = at if passed else None
            inc.step.finished = None if passed else at
            inc.step.detail = row.reason
            label = Rung(inc.step.rung).label.lower()
            if passed:
                inc.rem.status = Status.VALIDATING  # type: ignore[union-attr]
                inc.decide(at, f"{label} done; re-validating before production")
            else:
                done = inc.rungs.index(inc.step.rung) + 1 if inc.step.rung in inc.rungs else len(inc.rungs)
                nxt = inc.rungs[done] if done < len(inc.rungs) else Rung.REPAIR
                inc.rem.rung = nxt  # type: ignore[union-attr]
                inc.decide(at, f"{label} failed: {row.reason}; climbing to {Rung(nxt).label.lower()}")
        elif verb == "fail_validation" and inc.rem is not None and inc.rem.status == Status.VALIDATING:
            _verified(inc.step, StepStatus.FAILED, at, f"re-validation failed: {row.reason}")
            inc.rem.rung, inc.rem.status = Rung.REPAIR, Status.RUNNING
            inc.decide(at, f"re-validation failed: {row.reason}; climbing to repair")
        elif verb == "send_to_repair":
            if inc.rem is not None and inc.rem.is_open:
                inc.rem.rung = Rung.REPAIR
                inc.finish(Status.HANDED_OFF, at, "handed off: repair (technician)")
            inc.open_ticket(row, row.actor)
        elif verb == "send_to_rma":
            if inc.ticket is not None and inc.ticket.state == TicketState.OPEN:
                inc.ticket.state = TicketState.CANCELLED  # superseded: the part goes back to the vendor
            if inc.rem is not None and inc.rem.is_open:
                inc.rem.rung = Rung.RMA
                inc.finish(Status.HANDED_OFF, at, "handed off: RMA")
            gpu = inc.finding.gpu_index
            inc.open_case(row, row.actor, gpu_serials[gpu] if gpu is not None else node.serial)
        elif verb == "decommission":
            if inc.case is not None:
                inc.case.state, inc.case.fields["closed_at"] = RmaState.CANCELLED, at
            inc.resolve_alert(at, "node decommissioned")
            inc = None
        elif verb == "revalidate":  # back from a technician or the vendor
            if inc.ticket is not None and inc.ticket.state == TicketState.OPEN:
                _resolve(inc.ticket, at)
                out.names.append((row, "repair_ticket", inc.ticket))  # as resolve_repair names it
            if inc.case is not None and inc.case.state == RmaState.OPENED:
                out.names.append((row, "rma_case", inc.case))  # as close_rma names it
                case = inc.case.fields
                span = at - case["created"]
                inc.case.state = RmaState.CLOSED
                case |= {
                    "outcome": RmaOutcome.REPLACED,
                    "shipped_at": case["created"] + span * 0.1,
                    "returned_at": at - span * 0.1,
                    "closed_at": at,
                    "replacement_serial": f"{case['failed_serial'][:4]}R{int(at.timestamp()) % 10**8:08d}",
                }
        elif verb == "release_to_production":
            inc.resolve_alert(at, "back in production after re-validation")
            if inc.rem is not None and inc.rem.status == Status.VALIDATING:
                _verified(inc.step, StepStatus.PASSED, at, "re-validation passed")
                inc.finish(
                    Status.SUCCEEDED,
                    at,
                    f"back in production after {Rung(inc.rem.rung).label.lower()} and re-validation",
                )
            inc = None
    if inc is not None and life.state == NodeState.TRIAGE:
        inc.wait_in_triage(life.rows[-1].at if life.rows else now)
    return out


def _stage_run(node: Node, row: _Row, since: datetime) -> Run:
    """The run of the Day 1 stage ``row`` moves the node out of, as validation.services records it:
    passed on the stage's own verb, failed on a failed validation, cancelled when the node was taken
    out another way (the Day 1 yield on /reports/ and the trends count these). A stage the node is
    still in gets no run here: the running system starts it."""
    stage = BY_STATE[row.source]
    if row.transition == stage.pass_verb:
        status, summary = RunStatus.PASSED, f"{stage.stage} passed"
    elif row.transition == "fail_validation":
        status, summary = RunStatus.FAILED, row.reason[:300]
    else:
        status, summary = RunStatus.CANCELLED, f"stopped: {row.transition}"
    return Run(
        node=node,
        kind=stage.run_kind,
        status=status,
        created=since,
        started=since,
        finished=row.at,
        summary=summary,
        details={"seeded": True},
    )


def _verified(step: RemediationStep | None, status: str, at: datetime, detail: str) -> None:
    """A verifying step gets its answer, as remediation.services does when re-validation ends."""
    if step is not None and step.status == StepStatus.VERIFYING:
        step.status, step.finished, step.detail = status, at, f"{step.detail}; {detail}"


def _resolve(ticket: Paper, at: datetime) -> None:
    ticket.state, ticket.fields["resolved_at"] = TicketState.RESOLVED, at
