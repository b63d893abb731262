"""Portal pages of repairs: ticket and RMA lists and pages with the operators' verbs, and the
node page's partial (tickets and cases of one node, with forms to open them).

Querysets start from ``repairs.scoping`` (a customer sees its own nodes' records, read-only;
anything else is a 404); every change goes through ``repairs.services``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fleet.models import Site
from nodes.models import OPERATE
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden.errors import ReasonRequired

from . import services
from .choices import OPEN_RMA_STATES, OPEN_TICKET_STATES, RmaOutcome, RmaState, TicketState
from .filters import RepairTicketFilterSet, RmaCaseFilterSet
from .scoping import visible_cases, visible_tickets

PAGE_SIZE = 50
EVENTS_SHOWN = 200  # a ticket has a handful; the bound keeps a pathological one cheap
NODE_RECORDS = 20

Verb = Callable[[int, Actor, QueryDict], Any]
TICKET_VERBS: dict[str, Verb] = {
    "start": lambda pk, actor, post: services.start_repair(
        pk, actor=actor, reason=post.get("reason", ""), assignee=post.get("assignee", "")
    ),
    "resolve": lambda pk, actor, post: services.resolve_repair(pk, actor=actor, reason=post.get("reason", "")),
    "cancel": lambda pk, actor, post: services.cancel_repair(pk, actor=actor, reason=post.get("reason", "")),
}
RMA_VERBS: dict[str, Verb] = {
    "ship": lambda pk, actor, post: services.ship_rma(
        pk, actor=actor, reason=post.get("reason", ""), vendor_case_number=post.get("vendor_case_number", "")
    ),
    "receive": lambda pk, actor, post: services.receive_rma(
        pk,
        actor=actor,
        reason=post.get("reason", ""),
        outcome=post.get("outcome", ""),
        replacement_serial=post.get("replacement_serial", ""),
    ),
    "close": lambda pk, actor, post: services.close_rma(pk, actor=actor, reason=post.get("reason", "")),
    "cancel": lambda pk, actor, post: services.cancel_rma(pk, actor=actor, reason=post.get("reason", "")),
}


def _non_empty(query: QueryDict) -> QueryDict:
    """An empty form field means "any", not an invalid choice."""
    data = query.copy()
    for key in list(data):
        values = [v for v in data.getlist(key) if v != ""]
        if values:
            data.setlist(key, values)
        else:
            del data[key]
    return data


def _list_page(
    request: HttpRequest, filterset_class: type, queryset: QuerySet[Any], template: str, **context: Any
) -> HttpResponse:
    filterset = filterset_class(_non_empty(request.GET), queryset=queryset.order_by("-created", "-id"), request=request)
    valid = filterset.is_valid()
    page = Paginator(filterset.qs if valid else queryset.none(), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        template,
        {
            "page": page,
            "query": query.urlencode(),
            "errors": filterset.errors,
            "selected_states": request.GET.getlist("state"),
            **context,
        },
    )


def _transitions(record: Any, user: Any) -> list[dict[str, str]]:
    """The verbs this user may run on this record now: buttons come from the state machine."""
    if not user.has_perm(OPERATE):
        return []
    return [
        {"name": t.name, "label": t.custom["label"], "style": t.custom.get("style", "primary")}
        for t in record.get_available_user_state_transitions(user)
    ]


def _act(request: HttpRequest, record: Any, verbs: dict[str, Verb], verb: str, detail: str) -> HttpResponse:
    if verb not in verbs:
        raise Http404("No such action")
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not act on repairs.")
    try:
        verbs[verb](record.pk, Actor(user=request.user), request.POST)
        messages.success(request, f"#{record.pk}: {verb} done.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except (ReasonRequired, services.RepairConflict) as exc:
        messages.error(request, str(exc))
    except ObjectDoesNotExist as exc:
        raise Http404("Gone") from exc
    return redirect(detail, record.pk)


# --- Tickets ----------------------------------------------------------------------
def repair_list(request: HttpRequest) -> HttpResponse:
    """Tickets, newest first, filtered in the URL (state, site, rack, search)."""
    return _list_page(
        request,
        RepairTicketFilterSet,
        visible_tickets(request.user),
        "repairs/ticket_list.html",
        states=TicketState.choices,
        sites=Site.objects.order_by("name").only("name", "slug"),
    )


def repair_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One ticket: where, what, its history, and the verbs for operators."""
    ticket = get_object_or_404(visible_tickets(request.user), pk=pk)
    return render(
        request,
        "repairs/ticket_detail.html",
        {
            "ticket": ticket,
            "events": ticket.events.order_by("created", "id")[:EVENTS_SHOWN],
            "transitions": _transitions(ticket, request.user),
        },
    )


@require_POST
def repair_action(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Start, resolve or cancel one ticket (POST, reason required)."""
    ticket = get_object_or_404(visible_tickets(request.user), pk=pk)
    return _act(request, ticket, TICKET_VERBS, verb, "repair-detail")


# --- RMA cases ----------------------------------------------------------------------
def rma_list(request: HttpRequest) -> HttpResponse:
    """RMA cases, newest first, filtered in the URL (state, outcome, vendor, search)."""
    return _list_page(
        request,
        RmaCaseFilterSet,
        visible_cases(request.user),
        "repairs/rma_list.html",
        states=RmaState.choices,
        outcomes=RmaOutcome.choices,
    )


def rma_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One RMA case: part, serials, vendor case, outcome, its history, and the verbs for operators."""
    case = get_object_or_404(visible_cases(request.user), pk=pk)
    return render(
        request,
        "repairs/rma_detail.html",
        {
            "case": case,
            "events": case.events.order_by("created", "id")[:EVENTS_SHOWN],
            "transitions": _transitions(case, request.user),
            "outcomes": RmaOutcome.choices,
        },
    )


@require_POST
def rma_action(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Ship, receive, close or cancel one case (POST, reason required)."""
    case = get_object_or_404(visible_cases(request.user), pk=pk)
    return _act(request, case, RMA_VERBS, verb, "rma-detail")


# --- The node page's partial ------------------------------------------------------------
def node_repairs(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Repairs" partial (loaded with htmx): its tickets and cases, newest first."""
    node = visible_node_or_404(request.user, pk)
    return render(
        request,
        "repairs/_node_repairs.html",
        {
            "node": node,
            "can_operate": request.user.has_perm(OPERATE),
            "tickets": visible_tickets(request.user).filter(node=node).order_by("-created", "-id")[:NODE_RECORDS],
            "cases": visible_cases(request.user).filter(node=node).order_by("-created", "-id")[:NODE_RECORDS],
            "open_ticket_states": OPEN_TICKET_STATES,
            "open_rma_states": OPEN_RMA_STATES,
        },
    )


def _open(request: HttpRequest, pk: int, opener: Callable[[int, Actor], Any], detail: str) -> HttpResponse:
    node = visible_node_or_404(request.user, pk)
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not open repairs.")
    try:
        record = opener(node.pk, Actor(user=request.user))
    except ValidationError as exc:
        messages.error(request, " ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
    except (ReasonRequired, services.RepairConflict) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Opened #{record.pk} on {node.hostname}.")
        return redirect(detail, record.pk)
    return redirect("node-detail", node.pk)


@require_POST
def node_repair_open(request: HttpRequest, pk: int) -> HttpResponse:
    """Open a repair ticket on the node (from the partial's form)."""
    post = request.POST
    return _open(
        request,
        pk,
        lambda node_id, actor: services.open_repair_ticket(
            node_id,
            component=post.get("component", ""),
            what=post.get("what", ""),
            actor=actor,
            reason=post.get("reason", ""),
            assignee=post.get("assignee", ""),
            move_node="keep_node" not in post,
        ),
        "repair-detail",
    )


@require_POST
def node_rma_open(request: HttpRequest, pk: int) -> HttpResponse:
    """Open an RMA case on the node (from the partial's form)."""
    post = request.POST
    return _open(
        request,
        pk,
        lambda node_id, actor: services.open_rma_case(
            node_id,
            vendor=post.get("vendor", ""),
            part=post.get("part", ""),
            failed_serial=post.get("failed_serial", ""),
            actor=actor,
            reason=post.get("reason", ""),
            vendor_case_number=post.get("vendor_case_number", ""),
            move_node="keep_node" not in post,
        ),
        "rma-detail",
    )
