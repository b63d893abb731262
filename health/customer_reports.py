"""A customer reports a node they believe is bad: a finding with the customer as its source.

``report_bad_node`` (portal form and ``POST /api/nodes/{id}/report-bad/``) records the report as a
``customer_report`` finding of severity degraded, so it goes through the same policies as any other:
by default the node is drained when its current job ends, then remediated and re-validated. The
history row of the finding names the customer, their tenant and their reason (and the job id).

One open report per node: while its alert is firing, a further report (the same customer or a
colleague) is a note on the node's history, not a second finding, so a frustrated user's retries
never pile up findings or remediations. The report is answered on the history: the transitions that
follow show the outcome, and when the node returns to production the alert is resolved with a note
saying so (``answer_reports``, a follow-up of the verbs that bring a node back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from fleet.scoping import user_tenant_id
from nodes.choices import EventKind, NodeState
from nodes.models import OPERATE, Node, NodeEvent
from nodes.services import Actor, clean_reason, record_event

from .choices import AlertState, Severity
from .models import Alert, Finding
from .services import HEALTH, dedupe_key, raise_finding, resolve_alert_locked

RULE = "customer_report"
SOURCE = "customer"
REASON_MAX = 1000
JOB_ID_MAX = 100
ANSWERED = "the node passed its checks and is back in production"


class NotYourNode(PermissionError):
    """Only the node's tenant (or an operator on its behalf) may report it (a 403)."""


@dataclass(frozen=True)
class Report:
    """What a report became: a new finding, or a note on the open one."""

    finding: Finding | None
    event: NodeEvent
    duplicate: bool


def may_report(user: Any, node: Node) -> bool:
    """The node's tenant's users, and operators (on a customer's behalf); not staff viewers."""
    tenant_id = user_tenant_id(user)
    return (tenant_id is not None and tenant_id == node.tenant_id) or bool(user.has_perm(OPERATE))


def clean_report(reason: str | None, job_id: str | None) -> tuple[str, str]:
    """The reason is required and bounded; the job id optional and bounded (ReasonRequired/ValueError)."""
    reason = clean_reason(reason)
    if len(reason) > REASON_MAX:
        raise ValueError(f"The reason may be at most {REASON_MAX} characters.")
    job_id = " ".join((job_id or "").split())
    if len(job_id) > JOB_ID_MAX:
        raise ValueError(f"The job id may be at most {JOB_ID_MAX} characters.")
    return reason, job_id


def report_bad_node(node_id: int, *, user: Any, reason: str | None, job_id: str | None = "") -> Report:
    """Record a customer's report of a bad node (see the module docstring). Raises ReasonRequired or
    ValueError for bad input, NotYourNode for a user who may see the node but not report it."""
    reason, job_id = clean_report(reason, job_id)
    actor = Actor(user=user)
    with transaction.atomic():
        # The node's row lock serialises two reports of one node: the second sees the first's alert.
        node = Node.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=node_id)
        if not may_report(user, node):
            raise NotYourNode("Only the node's tenant can report it as bad.")
        tenant = node.tenant.name if node.tenant else "no tenant"
        job = f" (job {job_id})" if job_id else ""
        details = {"reporter": actor.name, "tenant": tenant, "job_id": job_id, "customer_reason": reason}
        if Alert.objects.filter(node=node, dedupe_key=dedupe_key(RULE, None, ""), state=AlertState.FIRING).exists():
            note = f"{actor.name} ({tenant}) reports the node again{job}: {reason}. The open report stands."
            event = record_event(node.pk, EventKind.NOTE, actor=actor, reason=note, details=details)
            return Report(None, event, duplicate=True)
        summary = f"Reported bad by {actor.name} ({tenant}){job}: {reason}"
        finding = raise_finding(
            node.pk,
            rule=RULE,
            severity=Severity.DEGRADED,
            summary=summary,
            evidence=details,
            source=SOURCE,
            actor=actor,
        )
        if finding is None or finding.event is None:  # a new alert always makes a finding: a bug if not
            raise RuntimeError(f"no finding recorded for the report of node {node.pk}")
        return Report(finding, finding.event, duplicate=False)


def answer_reports(node: Node, event: NodeEvent) -> str:
    """The node is back in production: the customer's open report is answered (its alert resolved
    with a note on the history). A follow-up of the verbs that bring a node back."""
    if event.target_state != NodeState.PRODUCTION:
        return ""
    with transaction.atomic():
        alert = (
            Alert.objects.select_for_update()
            .filter(node_id=node.pk, dedupe_key=dedupe_key(RULE, None, ""), state=AlertState.FIRING)
            .first()
        )
        if alert is None:
            return ""
        resolve_alert_locked(alert, reason=ANSWERED, actor=HEALTH)
    return "Customer report answered: the node is back in production."
