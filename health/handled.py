"""What already handles a node's alerts, for the alert list's rows: the apps above health (an
open remediation) contribute through ``handled_by`` in their ``AppConfig.ready``, as they
contribute the node page's facts (``nodes.whyhere``); health never imports them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Handler:
    """One thing at work on a node: its label, where to read about it, and the rule and GPU of
    the finding it answers (to tell "handles this alert" from "open on this node")."""

    label: str
    url: str
    rule: str = ""
    gpu_index: int | None = None


# fn(node ids) -> {node id: handler}, in one query for the whole page.
Lookup = Callable[[set[int]], dict[int, Handler]]
LOOKUPS: list[Lookup] = []


def handled_by(fn: Lookup) -> Lookup:
    """Register a lookup of what handles the nodes' alerts."""
    LOOKUPS.append(fn)
    return fn


def handlers(node_ids: Iterable[int]) -> dict[int, Handler]:
    """What handles each node's alerts, the first lookup's answer first."""
    ids = set(node_ids)
    found: dict[int, Handler] = {}
    for lookup in LOOKUPS:
        for node_id, handler in lookup(ids).items():
            found.setdefault(node_id, handler)
    return found
