"""Who waits for a reinstalled node to join, declared in one place.

A reinstall that provisioning prepares for someone else (``prepare_reimage``) ends when the
reinstalled node's agent joins with the reimage's token. Provisioning sits below that someone
(remediation runs the reimage rung), so it does not import it: the owner registers a finder
here in its ``AppConfig.ready`` and ``services.join`` asks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AwaitedRejoin:
    """A running reimage that the node's next join completes."""

    started: datetime  # a join token issued before this is not the reimage's
    complete: Callable[[str], bool]  # the owner's step is done; False if it no longer runs
    details: dict[str, Any] = field(default_factory=dict)  # copied into the join's history row


Finder = Callable[[int], AwaitedRejoin | None]
FINDERS: list[Finder] = []


def awaits_rejoin(fn: Finder) -> Finder:
    """Register a finder: given a node id, the reimage its owner runs for it, or None."""
    FINDERS.append(fn)
    return fn


def awaited_rejoin(node_id: int) -> AwaitedRejoin | None:
    """The reimage this node's join completes, asking the registered owners in order."""
    for find in FINDERS:
        awaited = find(node_id)
        if awaited is not None:
            return awaited
    return None
