"""Portal pages of the health app: the alert list with operator buttons, and the node page's partial.

Querysets start from ``health.scoping`` (customers see their tenant's nodes only);
every change goes through ``health.alerts``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.db.models import Count, Max, Min, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from nodes.models import OPERATE
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden import bulk, live
from nodewarden.errors import ReasonRequired

from . import alerts as verbs
from . import customer_reports
from .choices import SEVERITY_COLOURS, SEVERITY_RANK, AlertState, Severity
from .counts import firing_counts
from .filters import AlertFilterSet
from .handled import handlers
from .models import Alert
from .scoping import visible_alerts, visible_findings

PAGE_SIZE = 50
NODE_FINDINGS = 20
ALERT_RELATIONS = ("node__site", "node__cluster", "node__tenant", "acknowledged_by", "silenced_by")
# The grouped view: related alerts together, per node, then per component (a GPU, else the
# subject such as an IB port, else the node as a whole), worst first inside a group.
GROUPED_ORDER = ("node__hostname", "node_id", "gpu_index", "subject", "-severity_rank", "-last_seen", "-id")
WORST_FIRST = ("-severity_rank", "-last_seen", "-id")


def _filterset(request: HttpRequest) -> AlertFilterSet:
    data = request.GET.copy()
    if "state" not in data:
        data["state"] = AlertState.FIRING  # the default view: what is wrong now
    for key in list(data):  # an empty form field means "any", not an invalid choice
        values = [v for v in data.getlist(key) if v != ""]
        if values:
            data.setlist(key, values)
        else:
            del data[key]
    queryset = visible_alerts(request.user).select_related(*ALERT_RELATIONS)
    return AlertFilterSet(data, queryset=queryset, request=request)


def alert_list(request: HttpRequest) -> HttpResponse:
    """Alerts, worst first then most recent (or grouped per node and component), filtered in the
    URL; each row with its node's state and what already handles it; operators get the buttons."""
    filterset = _filterset(request)
    valid = filterset.is_valid()
    queryset = filterset.qs if valid else filterset.queryset.none()
    grouped = request.GET.get("group") == "node"
    page = Paginator(queryset.order_by(*(GROUPED_ORDER if grouped else WORST_FIRST)), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    rows = list(page.object_list)
    node_ids = {a.node_id for a in rows}
    found = handlers(node_ids)
    for a in rows:
        a.handler = found.get(a.node_id)
        a.handles_it = a.handler is not None and a.handler.rule == a.rule and a.handler.gpu_index == a.gpu_index
        a.group_key = f"{a.node_id}-{a.gpu_index if a.gpu_index is not None else ''}-{a.subject}"
    groups = _groups(queryset, node_ids) if grouped else {}
    for a in rows:
        a.group = groups.get(a.group_key)
    query = request.GET.copy()
    query.pop("page", None)
    toggle = query.copy()
    if grouped:
        toggle.pop("group", None)
    else:
        toggle["group"] = "node"
    return render(
        request,
        live.template_for(request, "health/alert_list.html", {"alert-rows": "health/_alert_rows.html"}),
        {
            "filterset": filterset,
            "firing": firing_counts(visible_alerts(request.user)),
            "page": page,
            "rows": rows,
            "query": query.urlencode(),
            "errors": filterset.errors,
            "can_operate": request.user.has_perm(OPERATE),
            "bulk_actions": bulk.actions_for("alerts", request.user),
            "states": AlertState.choices,
            "state": request.GET.get("state", AlertState.FIRING),
            "grouped": grouped,
            "group_toggle": toggle.urlencode(),
        },
    )


def _groups(queryset: QuerySet[Alert], node_ids: set[int]) -> dict[str, dict[str, Any]]:
    """The head row of each group (node and component) shown on the page, counted over the whole
    filtered list, not just this page: how many alerts, the worst severity, first and last seen.
    One query, bounded by the page's nodes."""
    rows = (
        queryset.filter(node_id__in=node_ids)
        .order_by()
        .values("node_id", "gpu_index", "subject")
        .annotate(
            count=Count("id"), worst=Max("severity_rank"), first_seen=Min("first_seen"), last_seen=Max("last_seen")
        )
    )
    worst = {rank: severity for severity, rank in SEVERITY_RANK.items()}
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = f"{r['node_id']}-{r['gpu_index'] if r['gpu_index'] is not None else ''}-{r['subject']}"
        groups[key] = {**r, "severity": worst.get(r["worst"], "")}
    return groups


@require_POST
def alert_bulk_action(request: HttpRequest) -> HttpResponse:
    """Run one of the alert list's bulk actions (acknowledge, silence, open a repair ticket) with
    one reason on the selected alerts: the registry's verb once per alert (own transaction, own
    history note), then one message naming every alert's outcome (``nodewarden.bulk.run``)."""

    def visible(ids: list[int]) -> set[int]:
        return set(visible_alerts(request.user).filter(pk__in=ids).values_list("pk", flat=True))

    return bulk.run(request, "alerts", visible=visible, noun="alert", back="alert-list")


VERBS = {
    "acknowledge": lambda pk, actor, post: verbs.acknowledge(pk, actor=actor, note=post.get("reason", "")),
    "silence": lambda pk, actor, post: verbs.silence(
        pk, actor=actor, reason=post.get("reason", ""), minutes=_minutes(post.get("minutes"))
    ),
    "unsilence": lambda pk, actor, post: verbs.unsilence(pk, actor=actor, reason=post.get("reason", "")),
    "resolve": lambda pk, actor, post: verbs.resolve(pk, actor=actor, reason=post.get("reason", "")),
}


def _minutes(value: str | None) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise ValueError("Silence duration must be a whole number of minutes.") from None


@require_POST
def alert_action(request: HttpRequest, pk: int, verb: str) -> HttpResponse:
    """Acknowledge, silence, unsilence or resolve one alert (POST, reason required)."""
    alert = get_object_or_404(visible_alerts(request.user), pk=pk)
    if verb not in VERBS:
        raise Http404("No such action")
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not act on alerts.")
    try:
        VERBS[verb](alert.pk, Actor(user=request.user), request.POST)
        messages.success(request, f"Alert {verb}d." if verb.endswith("e") else f"Alert {verb}ed.")
    except (ReasonRequired, ValueError) as exc:  # AlertNotFiring is a ValueError too
        messages.error(request, str(exc))
    except ObjectDoesNotExist as exc:
        raise Http404("No such alert") from exc
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "alert-list"
    return redirect(target)


def node_alerts(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Alerts" partial (loaded with htmx): open alerts and the latest findings."""
    node = visible_node_or_404(request.user, pk)
    open_alerts = (
        visible_alerts(request.user).filter(node=node, state=AlertState.FIRING).order_by("-severity_rank", "-last_seen")
    )
    findings = visible_findings(request.user).filter(node=node, shadow=False)[:NODE_FINDINGS]
    can_report = customer_reports.may_report(request.user, node)
    context = {"node": node, "alerts": open_alerts, "findings": findings, "can_report": can_report}
    return render(request, "health/_node_alerts.html", context)


@require_POST
def report_bad_node(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Report this node as bad" form (``health.customer_reports``)."""
    node = visible_node_or_404(request.user, pk)
    if not customer_reports.may_report(request.user, node):
        return HttpResponseForbidden("Only the node's tenant can report it as bad.")
    try:
        report = customer_reports.report_bad_node(
            node.pk, user=request.user, reason=request.POST.get("reason"), job_id=request.POST.get("job_id")
        )
    except ValueError as exc:  # ReasonRequired too
        messages.error(request, str(exc))
    except ObjectDoesNotExist as exc:
        raise Http404("No such node") from exc
    else:
        done = "Your report is already open; this one was added to the node's history."
        messages.success(request, done if report.duplicate else "Thank you: the node will be checked.")
    return redirect("node-detail", pk=node.pk)


def alert_summary(request: HttpRequest) -> HttpResponse:
    """The fleet overview's alert tiles (loaded with htmx): firing alerts per severity (``health.counts``)."""
    counts = firing_counts(visible_alerts(request.user))
    tiles = [
        {"severity": s, "label": s.label, "count": counts.by_severity[s], "colour": SEVERITY_COLOURS[s]}
        for s in Severity
    ]
    return render(request, "health/_alert_summary.html", {"tiles": tiles, "firing": counts})
