"""What a node's workload scheduler is told of the node's health, besides the cordon: declared here.

Kubernetes shows it the way node-problem-detector does (``KubernetesAdapter.report``): a Node
condition ``NodewardenHealthy`` (True only in production with no firing serious finding), the
labels ``nodewarden.io/state`` and ``nodewarden.io/persona``, and a core/v1 Event on the Node for
each transition and finding. Slurm shows the same in the node's reason (``reactions.scheduler_reason``)
and needs nothing more; other adapters answer False to ``reports_health``.

Two roads lead here, both after commit: every transition (``reactions.report_transition``, a
follow-up of every verb) and every new finding or changed alert. Findings live in health, above
this app: health registers the view of a node's worst open problem (``problem_view``) and queues
``tasks.report_node_health`` from its own follow-up registry (``health.scheduler_status``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from nodes.choices import EventKind, NodeState
from nodes.models import Node, NodeEvent

CONDITION_NAME = "NodewardenHealthy"  # KubernetesAdapter writes it (kubernetes.CONDITION)
STATE_LABEL = "nodewarden.io/state"
PERSONA_LABEL = "nodewarden.io/persona"
TRANSITION_EVENT = "NodewardenTransition"
FINDING_EVENT = "NodewardenFinding"
ACTION_EVENT = "NodewardenAction"
HEALTHY_REASON = "InProduction"
MESSAGE_MAX = 1024  # a condition's message is free text; NPD keeps them short too


@dataclass(frozen=True)
class Problem:
    """The worst open serious finding of a node, as health sees it."""

    rule: str
    summary: str


@dataclass(frozen=True)
class NodeEventNote:
    """A Kubernetes Event to post on the Node (reason is CamelCase, type Normal or Warning)."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class HealthReport:
    """What the scheduler should show of a node now: one condition, labels, and maybe an Event."""

    healthy: bool
    reason: str
    message: str
    labels: dict[str, str | None] = field(default_factory=dict)
    event: NodeEventNote | None = None


ProblemView = Callable[[int], Problem | None]
PROBLEM_VIEWS: list[ProblemView] = []


def problem_view(fn: ProblemView) -> ProblemView:
    """Register ``fn(node_id)``: the node's worst open serious problem, or None (health does)."""
    PROBLEM_VIEWS.append(fn)
    return fn


def worst_problem(node_id: int) -> Problem | None:
    for view in PROBLEM_VIEWS:
        problem = view(node_id)
        if problem is not None:
            return problem
    return None


def camel(word: str) -> str:
    """``drain_pending`` -> ``DrainPending``, ``xid-79`` -> ``Xid79``: a condition's reason is CamelCase."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", word) if part) or "Unknown"


def label_value(text: str) -> str:
    """A valid label value (63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def last_transition(node: Node) -> NodeEvent | None:
    """The node's latest transition, forced or not (index node, -created)."""
    return (
        NodeEvent.objects.filter(node=node, kind__in=(EventKind.TRANSITION, EventKind.FORCED))
        .order_by("-created", "-pk")
        .first()
    )


def health_report(node: Node, *, event: NodeEventNote | None = None) -> HealthReport:
    """The condition, labels and Event for the node as it is now.

    Out of production: False, the state in CamelCase, the latest transition's reason (and the open
    finding's summary). In production: False with the worst open serious finding's rule and summary,
    else True (``InProduction``)."""
    problem = worst_problem(node.pk)
    state = NodeState(node.state)
    labels: dict[str, str | None] = {
        STATE_LABEL: label_value(state.value),
        PERSONA_LABEL: label_value(node.persona.name) if node.persona_id and node.persona else None,
    }
    if state != NodeState.PRODUCTION:
        transition = last_transition(node)
        message = f"{state.label}: {transition.reason if transition else ''}".strip(" :")
        if problem and problem.summary not in message:
            message = f"{message}; {problem.rule}: {problem.summary}"
        return HealthReport(False, camel(state.value), _short(message), labels, event)
    if problem is not None:
        return HealthReport(False, camel(problem.rule), _short(problem.summary), labels, event)
    return HealthReport(True, HEALTHY_REASON, "In production; no open serious finding.", labels, event)


def _short(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_MAX]
