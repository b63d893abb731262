"""Why a node is where it is, since when, and what comes next: the node page's header.

The node's own history answers "since when" and "who moved it, and why": the latest state
change, and the verb that began the road it is on (a drain is requested by someone, then
started and completed by the scheduler: the requester is the cause, not the scheduler). A
finding recorded on that road (between the previous change and the verb) names the condition.

What the apps above nodes know (the open remediation and its next step, firing alerts, the
scheduler's last known view, the open repair ticket or RMA case, the Day 1 stage) they contribute through ``why_here_fact`` in their
``AppConfig.ready``: nodes sits below them and never imports them. Each contributor reads a
fixed number of rows, and nothing here calls a scheduler or a BMC: the page shows what is
stored, so its cost does not grow with the node's history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bmc.models import BmcEndpoint

from .choices import ActorKind, EventKind, NodeState
from .models import STATE_CHANGE_KINDS, Node, NodeEvent

# Transitions that carry on a road an earlier verb began; the cause is that verb.
CONTINUATIONS = frozenset({"start_draining", "complete_drain"})
RECENT_CHANGES = 20  # state changes read to find the start of the current road
FACT_ORDER = (
    "maintenance",
    "remediation",
    "repair",
    "rma",
    "validation",
    "hold",
    "alerts",
    "scheduler",
    "bmc",
)  # what comes next first, the machine last
OPERATOR_WORD = "an operator"  # what a customer reads instead of a staff member's username


@dataclass(frozen=True)
class Fact:
    """One line of the header an app contributes: a label, a text, and how loud it is."""

    key: str  # stable id for tests and CSS: "remediation", "alerts", "scheduler", "bmc", ...
    label: str
    text: str
    tone: str = "info"  # "info", "warning" or "danger"
    eta: Any = None  # a datetime when the app knows when the next step is due
    link: str = ""  # the record the line is about (a ticket, a case), when it has a page


@dataclass(frozen=True)
class Cause:
    """The state change that put the node here and, if one did, the verb that began its road."""

    latest: NodeEvent
    origin: NodeEvent
    actor: str
    finding_rule: str = ""
    finding_summary: str = ""


@dataclass
class WhyHere:
    node: Node
    cause: Cause | None
    facts: list[Fact] = field(default_factory=list)


# (node, latest state-change event or None, operator view?) -> facts
Provider = Callable[[Node, NodeEvent | None, bool], list[Fact]]
PROVIDERS: list[Provider] = []


def why_here_fact(fn: Provider) -> Provider:
    """Register ``fn(node, latest_change, operator)``: facts for the header, in bounded queries."""
    PROVIDERS.append(fn)
    return fn


def why_here(node: Node, *, operator: bool) -> WhyHere:
    """The header's content: the cause of the node's state, then every app's facts."""
    changes = list(
        NodeEvent.objects.filter(node=node, kind__in=STATE_CHANGE_KINDS).order_by("-created", "-id")[:RECENT_CHANGES]
    )
    cause = _cause(node, changes, operator)
    latest = changes[0] if changes else None
    facts: list[Fact] = []
    for provider in PROVIDERS:
        facts += provider(node, latest, operator)
    if node.state == NodeState.MAINTENANCE and cause is not None:
        facts.append(_maintenance_fact(cause))
    facts.append(_bmc_fact(node, operator))
    facts.sort(key=lambda f: FACT_ORDER.index(f.key) if f.key in FACT_ORDER else len(FACT_ORDER))
    return WhyHere(node, cause, facts)


def _cause(node: Node, changes: list[NodeEvent], operator: bool) -> Cause | None:
    if not changes:
        return None
    i = 0
    while i + 1 < len(changes) and changes[i].transition in CONTINUATIONS:
        i += 1
    origin = changes[i]
    since = changes[i + 1].created if i + 1 < len(changes) else None
    findings = NodeEvent.objects.filter(node=node, kind=EventKind.FINDING, created__lte=origin.created)
    if since is not None:
        findings = findings.filter(created__gte=since)
    finding = findings.order_by("-created", "-id").only("reason", "details").first()
    rule = str(finding.details.get("rule", "")) if finding and isinstance(finding.details, dict) else ""
    return Cause(
        latest=changes[0],
        origin=origin,
        actor=actor_shown(origin, operator),
        finding_rule=rule,
        finding_summary=finding.reason if finding else "",
    )


def actor_shown(event: NodeEvent, operator: bool) -> str:
    """Who made the change, as this viewer may read it: customers see "an operator", not a username."""
    if operator or event.actor_kind != ActorKind.USER:
        return event.actor_name
    return OPERATOR_WORD


def _maintenance_fact(cause: Cause) -> Fact:
    """Who put the node in maintenance, when and why (the verb that began its road: the operator's
    ``start_maintenance`` or plain drain), and what ends it."""
    origin = cause.origin
    return Fact(
        "maintenance",
        "Maintenance",
        f"Maintenance since {origin.created:%Y-%m-%d %H:%M} UTC by {cause.actor}: {origin.reason}. "
        "Ends when an operator runs End maintenance, saying what was done: the node walks the "
        "re-validation plan that fits it (nothing touched: the inventory check only), then production.",
    )


def _bmc_fact(node: Node, operator: bool) -> Fact:
    """The BMC as last seen: no live call from a page render (a BMC may take seconds to answer)."""
    fields = ("last_contact_at", "last_error", "last_power_state", "last_power_state_at", "last_poll_at")
    bmc = BmcEndpoint.objects.filter(node=node).only(*fields).first()
    if bmc is None:
        return Fact("bmc", "BMC", "No BMC endpoint configured.")
    if bmc.last_power_state and bmc.last_power_state_at:
        text = f"Power {bmc.last_power_state} (read {bmc.last_power_state_at:%Y-%m-%d %H:%M} UTC)."
    elif bmc.last_contact_at is None and bmc.last_poll_at is None:
        # Said as what happens next: the poller (bmc.services.poll_power_states) reaches every endpoint.
        text = "Power state not read yet: the BMC poller reads it within minutes."
    elif bmc.last_contact_at is None:
        text = f"The BMC has not answered yet (last tried {bmc.last_poll_at:%Y-%m-%d %H:%M} UTC)."
    else:
        text = "Power state not read yet."
    if bmc.last_error and operator:
        return Fact("bmc", "BMC", f"{text} Last error: {bmc.last_error[:200]}", tone="warning")
    return Fact("bmc", "BMC", text)
