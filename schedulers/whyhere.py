"""The node page header's scheduler line: what Nodewarden last asked of the node's scheduler.

From the declared reactions and the owed (failed, retried) reaction only: a page render never
asks a scheduler live (a slow ``scontrol`` would hold the page).
"""

from __future__ import annotations

from nodes.models import Node, NodeEvent
from nodes.whyhere import Fact

from .models import PendingReaction
from .reactions import Reaction, reaction_for


def scheduler_view(node: Node, latest: NodeEvent | None, operator: bool) -> list[Fact]:
    """One query (the owed reaction); the rest comes from the latest change and the reactions table."""
    if node.cluster_id is None:
        return [Fact("scheduler", "Scheduler", "No cluster: no scheduler.")]
    reaction = reaction_for(latest.transition, latest.target_state) if latest else None
    asked = Reaction(reaction).label if reaction else "Nothing asked"
    text = f"{asked} (after {latest.transition or latest.kind})." if latest else "Nothing asked yet."
    owed = PendingReaction.objects.filter(node=node).only("reaction", "attempts", "last_error").first()
    if owed is None:
        return [Fact("scheduler", "Scheduler", text)]
    tries = f"retried {owed.attempts}×" if owed.attempts else "queued"
    text += f" Not yet acknowledged by the scheduler: {owed.reaction}, {tries}"
    text += f" ({owed.last_error[:200]})." if operator and owed.last_error else "."
    return [Fact("scheduler", "Scheduler", text, tone="warning")]
