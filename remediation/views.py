"""Portal pages of remediation: the node page's "Remediation" partial (the ladder, the
decisions, the operator's approve, skip and stop), and the fleet's remediation page for
staff (open work, breakers, holds, time to recover, availability per cluster).

Customers see their own nodes' panels, read-only; the fleet page answers them 404.
Every change goes through ``remediation.services``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet.models import Cluster
from nodes.counts import node_counts
from nodes.models import OPERATE, Node, StateCountSnapshot
from nodes.scoping import is_operator_view, staff_only, visible_node_or_404, visible_nodes
from nodes.services import Actor
from nodewarden import live, timerange
from nodewarden.errors import ReasonRequired

from . import charts, services, summary
from .choices import Rung, Status
from .filters import RemediationFilterSet
from .machine import RemediationConflict
from .models import Remediation

PAGE_SIZE = 50
AVAILABILITY_DAYS = 30
VERBS: dict[str, Callable[..., Remediation]] = {
    "approve": services.approve,
    "skip-rung": services.skip_rung,
    "stop": services.stop,
}
REFUSALS = (ReasonRequired, RemediationConflict)


class HoldForm(forms.Form):
    """A hold on one node (by hostname) or on a whole cluster, with a reason."""

    hostname = forms.CharField(required=False, max_length=253)
    cluster = forms.ModelChoiceField(
        Cluster.objects.order_by("name"), required=False, to_field_name="name", empty_label="or a cluster"
    )
    until = forms.DateTimeField(required=False, help_text="UTC; empty: until released.")
    reason = forms.CharField(max_length=1000, error_messages={"required": "A reason is required."})

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        hostname, cluster = data.get("hostname", "").strip(), data.get("cluster")
        if bool(hostname) == bool(cluster):
            raise forms.ValidationError("Give a node's hostname or a cluster (one of the two).")
        if hostname:
            data["node"] = Node.objects.filter(hostname=hostname).first()
            if data["node"] is None:
                raise forms.ValidationError(f"No node {hostname!r}.")
        if data.get("until") and data["until"] <= timezone.now():
            raise forms.ValidationError("The hold would end in the past.")
        return data


# --- A node's panel ------------------------------------------------------------------------------


@login_required
def node_remediation(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Remediation" partial (htmx): the current or last remediation, earlier ones."""
    node = visible_node_or_404(request.user, pk)
    panel = summary.node_panel(node)
    can_act = request.user.has_perm(OPERATE)
    return render(
        request,
        "remediation/_node_remediation.html",
        {
            "node": node,
            **panel,
            "staff": is_operator_view(request.user),
            "actions": summary.actions_for(panel["current"]) if can_act else [],
        },
    )


@login_required
@require_POST
def remediation_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Approve, skip the current rung of, or stop a remediation, with a reason; then back to the node."""
    rem = get_object_or_404(summary.visible_remediations(request.user), pk=pk)
    verb = VERBS.get(action)
    if verb is None:
        raise Http404("No such action")
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not operate remediations.")
    try:
        done = verb(rem.pk, actor=Actor(user=request.user), reason=request.POST.get("reason", ""))
    except services.RemediationForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except REFUSALS as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, f"Remediation {done.pk}: {done.get_status_display().lower()} ({done.get_rung_display().lower()})."
        )
    return redirect("node-detail", pk=rem.node_id)


# --- The fleet -----------------------------------------------------------------------------------


def _query(request: HttpRequest) -> QueryDict:
    """The list's filters: open remediations unless a status is asked for; an empty field means "any"."""
    data = request.GET.copy()
    if "status" not in data and "open" not in data:
        data["open"] = "true"
    for key in list(data):
        values = [v for v in data.getlist(key) if v != ""]
        if values:
            data.setlist(key, values)
        else:
            del data[key]
    return data


def _open_list(request: HttpRequest) -> tuple[RemediationFilterSet, Any, str]:
    # node and its cluster: the hostname and cluster columns; finding: what caused it.
    queryset = (
        Remediation.objects.select_related("node__cluster", "finding").defer("decisions").order_by("created", "id")
    )
    filterset = RemediationFilterSet(_query(request), queryset=queryset, request=request)
    rows: QuerySet[Remediation] = filterset.qs if filterset.is_valid() else queryset.none()
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return filterset, page, query.urlencode()


@login_required
def remediation_summary(request: HttpRequest) -> HttpResponse:
    """The fleet overview's remediation tiles (htmx): open remediation records and nodes in the
    Remediation state, side by side and named apart, since they differ by design."""
    open_total = sum(summary.open_by_status_and_rung(summary.visible_remediations(request.user)).values())
    nodes = node_counts(visible_nodes(request.user))
    return render(
        request,
        "remediation/_summary.html",
        {"open_total": open_total, "in_remediation_state": nodes.in_remediation_state},
    )


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """Open remediations by status and rung, breakers, holds, MTTR, availability, the open list."""
    now = timezone.now()
    filterset, page, query = _open_list(request)
    fragment = live.wanted_fragment(request, {"remediation-rows": "remediation/_list_rows.html"})
    if fragment:  # a live refresh of the list (static/js/live.js): the rows only
        return render(request, fragment, {"page": page, "now": now})
    by_status, by_rung = summary.open_counts(Remediation.objects.all())
    try:
        window = timerange.from_request(request, default=f"{AVAILABILITY_DAYS}d")
    except timerange.BadRange as exc:
        return timerange.bad_request(exc)
    snapshots = StateCountSnapshot.objects.filter(taken_at__gte=window.start, taken_at__lte=window.end)
    availability_chart = charts.availability_by_cluster(snapshots)
    availability_chart["layout"]["xaxis"]["range"] = window.axis_range()
    return render(
        request,
        "remediation/overview.html",
        {
            "by_status": by_status,
            "by_rung": by_rung,
            "open_total": sum(t["count"] for t in by_status),
            "in_remediation_state": node_counts(Node.objects.all()).in_remediation_state,
            "breakers": summary.tripped_breakers(),
            "holds": summary.active_holds(now),
            "mttr": summary.mttr(Remediation.objects.all(), now),
            "availability_chart": availability_chart,
            **timerange.picker_context(request, window),
            "filterset": filterset,
            "errors": filterset.errors,
            "page": page,
            "query": query,
            "statuses": Status.choices,
            "rungs": Rung.choices,
            "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
            "can_operate": request.user.has_perm(OPERATE),
            "now": now,
        },
    )


def _operate(request: HttpRequest, act: Callable[[Actor], str]) -> HttpResponse:
    """Run a safety verb for an operator: refusals as messages, then back to the fleet page."""
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not operate remediations.")
    try:
        messages.success(request, act(Actor(user=request.user)))
    except services.RemediationForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except REFUSALS as exc:
        messages.error(request, str(exc))
    except ObjectDoesNotExist as exc:
        raise Http404("No such hold or breaker") from exc
    return redirect("remediation-overview")


def _form_errors(form: forms.Form) -> str:
    return " ".join(str(error) for errors in form.errors.values() for error in errors)


@staff_only
@require_POST
def hold_place(request: HttpRequest) -> HttpResponse:
    """Hold automated actions on a node or a cluster until released (or until a time)."""
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not operate remediations.")
    form = HoldForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("remediation-overview")
    data = form.cleaned_data
    node, cluster = data.get("node"), data.get("cluster")

    def place(actor: Actor) -> str:
        services.place_hold(
            actor=actor,
            reason=data["reason"],
            node_id=node.pk if node else None,
            cluster_id=cluster.pk if cluster else None,
            until=data.get("until"),
        )
        return f"Hold placed on {node or cluster}: no automated action there until it is released."

    return _operate(request, place)


@staff_only
@require_POST
def hold_release(request: HttpRequest, pk: int) -> HttpResponse:
    """End a hold early, with a reason."""
    reason = request.POST.get("reason", "")
    return _operate(request, lambda actor: f"{services.release_hold(pk, actor=actor, reason=reason)}: released.")


@staff_only
@require_POST
def breaker_reset(request: HttpRequest, pk: int) -> HttpResponse:
    """An operator has looked at the spike: automated actions may resume in the cluster."""
    reason = request.POST.get("reason", "")

    def reset(actor: Actor) -> str:
        breaker = services.reset_breaker(pk, actor=actor, reason=reason)
        return f"Circuit breaker of {breaker.cluster} reset: automated actions resume there."

    return _operate(request, reset)
