"""The node list's bulk actions, declared once each (``nodewarden.bulk.register``): drain, set to
drain, cordon, start maintenance, cancel a drain, re-validate, send to repair, hold and release automation, open a
repair ticket.

Declared here, not in nodes, because three of them need what sits above nodes: the blast-radius
limits and holds (remediation.safety) and repair tickets (repairs). Every action calls the
one-by-one verb once per node, in its own transaction with its own history row; a take-out
(cordon, drain, start maintenance) first counts the node's failure domains against the blast-radius limits an admin
configured (``BlastRadiusLimit``; the built-in default is for automation only), under the
cluster's row lock as the remediation engine's admission does, so ten nodes selected against a
limit of three are three taken out and seven refused with the limit's reason, whatever else runs
at the same time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import QueryDict
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from fleet.models import Cluster
from nodes import services as node_services
from nodes.choices import NodeState
from nodes.models import OPERATE, Node
from nodes.services import Actor
from nodewarden.bulk import BulkAction, Outcome, each_item, register
from nodewarden.errors import TransitionForbidden
from repairs import services as repairs

from . import safety
from .machine import RemediationConflict
from .models import Hold
from .services import RemediationForbidden, place_hold, release_hold

S = NodeState
NODE_LIST = "nodes"
# Set to drain counts as leaving: a drain requested now takes the node out when its job ends.
LEAVING = (*safety.OUT, S.DRAIN_PENDING)
REFUSALS: tuple[type[BaseException], ...] = (
    TransitionNotAllowed,
    TransitionForbidden,
    ConcurrentTransition,
    RemediationConflict,
    RemediationForbidden,
    ValidationError,
)


class BlastRadiusRefused(TransitionNotAllowed):
    """Taking this node out now would exceed a failure domain's blast-radius limit."""


def _hostnames(ids: list[int]) -> dict[int, str]:
    return dict(Node.objects.filter(pk__in=ids).values_list("pk", "hostname"))


def _each(call: Callable[[int, Actor, str, QueryDict], object]) -> Callable[..., list[Outcome]]:
    """A per-node ``each`` from a one-node call: the node's hostname as its label, the verbs'
    refusals as that node's outcome."""

    def each(ids: list[int], user: Any, reason: str, post: QueryDict) -> list[Outcome]:
        actor = Actor(user=user)
        return each_item(
            ids, _hostnames(ids), lambda pk: call(pk, actor, reason, post), REFUSALS, missing=(Node.DoesNotExist,)
        )

    return each


def _verb(name: str) -> Callable[[int, Actor, str, QueryDict], object]:
    def call(pk: int, actor: Actor, reason: str, post: QueryDict) -> object:
        return node_services.perform(pk, name, actor=actor, reason=reason)

    return call


def _take_out(name: str) -> Callable[[int, Actor, str, QueryDict], object]:
    """The verb, refused if taking the node out would exceed a blast-radius limit: counted and
    done under the cluster's row lock (the lock ``services.admit`` takes), one node at a time, so
    each node is counted against the fleet as the nodes before it left it."""

    def call(pk: int, actor: Actor, reason: str, post: QueryDict) -> object:
        with transaction.atomic():
            node = Node.objects.get(pk=pk)
            if node.cluster_id:
                list(Cluster.objects.select_for_update().filter(pk=node.cluster_id).values_list("pk"))
                node.refresh_from_db()
            if node.state in safety.SERVING:
                block = safety.blast_radius_block(node, timezone.now(), leaving=LEAVING, configured_only=True)
                if block:
                    raise BlastRadiusRefused(f"stopped by the {block}")
            return node_services.perform(pk, name, actor=actor, reason=reason)

    return call


def _hold(pk: int, actor: Actor, reason: str, post: QueryDict) -> object:
    """Pause automated remediation on the node until released (``safety.active_hold``)."""
    node = Node.objects.get(pk=pk)
    standing = Hold.objects.filter(node=node, released_at__isnull=True).first()
    if standing is not None and (standing.until is None or standing.until > timezone.now()):
        raise RemediationConflict(f"already on hold: {standing.reason} ({standing.actor_name})")
    return place_hold(actor=actor, reason=reason, node_id=node.pk)


def _release(pk: int, actor: Actor, reason: str, post: QueryDict) -> list[object]:
    """Release the node's own holds (a cluster's or the fleet's hold is released on its page)."""
    node = Node.objects.get(pk=pk)
    holds = list(Hold.objects.filter(node=node, released_at__isnull=True).values_list("pk", flat=True))
    if not holds:
        raise RemediationConflict("no hold on this node")
    return [release_hold(h, actor=actor, reason=reason) for h in holds]


def _ticket(pk: int, actor: Actor, reason: str, post: QueryDict) -> object:
    """A technician's ticket for the node, the reason as what to look at; a node in triage or
    remediation goes to repair with it (``repairs.services.open_repair_ticket``)."""
    component = (post.get("component") or "").strip() or "node"
    return repairs.open_repair_ticket(pk, component=component, what=reason, actor=actor, reason=reason)


# (name, label, what the summary says of the nodes it was done to, the one-node call); a label of
# None is the transition's own (``Node``'s declared label, as on the node page's button).
ACTIONS: tuple[tuple[str, str | None, str, Callable[[int, Actor, str, QueryDict], object]], ...] = (
    ("start_draining", None, "drained", _take_out("start_draining")),
    ("request_drain", None, "set to drain when their job ends", _take_out("request_drain")),
    ("cordon", None, "cordoned", _take_out("cordon")),
    # Planned work: drains like "Drain when job ends", then waits in maintenance until ended.
    ("start_maintenance", None, "set to maintenance (drain when their job ends)", _take_out("start_maintenance")),
    ("cancel_drain", None, "back in production (drain cancelled)", _verb("cancel_drain")),
    ("revalidate", None, "sent to re-validation", _verb("revalidate")),
    ("send_to_repair", None, "sent to repair", _verb("send_to_repair")),
    ("hold", "Hold automation", "held (no automated remediation until released)", _hold),
    ("release_hold", "Release hold", "released from hold", _release),
    ("open_ticket", "Open a repair ticket", "given a repair ticket", _ticket),
)


def register_node_actions() -> None:
    """Declare the node list's actions (``RemediationConfig.ready``)."""
    for name, label, done_word, call in ACTIONS:
        label = label or node_services.transition_meta(name)["label"]
        register(NODE_LIST, BulkAction(name, label, OPERATE, _each(call), done_word))
