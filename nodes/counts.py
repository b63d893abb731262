"""The node counts every page and /metrics shows: nodes per lifecycle state, nodes in trouble and
nodes in maintenance (an operator's planned work: out of production, not trouble).

One definition each, so the overview, the remediation page and /metrics cannot disagree: "in
trouble" is the nodes in ``TROUBLE_STATES``; "in Remediation state" is the nodes whose lifecycle
state is ``remediating`` (not the open remediation records: ``remediation.summary`` counts those).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from .choices import TROUBLE_STATES, NodeState
from .models import Node


@dataclass(frozen=True)
class NodeCounts:
    """Nodes per state (every state, zeros included), their total and those in trouble."""

    by_state: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @property
    def in_trouble(self) -> int:
        return sum(self.by_state[s] for s in TROUBLE_STATES)

    @property
    def in_maintenance(self) -> int:
        """Out of production on purpose (an operator's maintenance): counted apart, not as trouble."""
        return self.by_state[NodeState.MAINTENANCE]

    @property
    def in_remediation_state(self) -> int:
        return self.by_state[NodeState.REMEDIATING]


def node_counts(nodes: QuerySet[Node]) -> NodeCounts:
    """The counts of ``nodes`` (already scoped to what the reader may see), in one query."""
    counts = dict(nodes.values_list("state").annotate(n=Count("id")).order_by())
    return NodeCounts({state: counts.get(state, 0) for state in NodeState.values})
