"""Portal pages of the health app: the alert list with operator buttons, and the node page's partial.

Querysets start from ``health.scoping`` (customers see their tenant's nodes only);
every change goes through ``health.alerts``.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from nodes.models import OPERATE
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden import live
from nodewarden.bulk import Outcome, SelectionRefused, selected_ids, summary
from nodewarden.errors import ReasonRequired

from . import alerts as verbs
from . import customer_reports
from .choices import SEVERITY_COLOURS, AlertState, Severity
from .counts import firing_counts
from .filters import AlertFilterSet
from .scoping import visible_alerts, visible_findings

PAGE_SIZE = 50
NODE_FINDINGS = 20
ALERT_RELATIONS = ("node__site", "node__cluster", "node__tenant", "acknowledged_by", "silenced_by")
# The grouped view: related alerts together, per node, then per component (a GPU, else the
# subject such as an IB port, else the node as a whole), worst first inside a group.
GROUPED_ORDER = ("node__hostname", "node_id", "gpu_index", "subject", "-severity_rank", "-last_seen", "-id")
WORST_FIRST = ("-severity_rank", "-last_seen", "-id")
# The alert list's bulk verbs -> what the summary says of the alerts it was done to.
BULK_ACTIONS = {"acknowledge": "acknowledged", "silence": "silenced"}


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
    """Alerts, worst first then most recent, filtered in the URL; operators get the buttons."""
    filterset = _filterset(request)
    valid = filterset.is_valid()
    queryset = filterset.qs if valid else filterset.queryset.none()
    grouped = request.GET.get("group") == "node"
    page = Paginator(queryset.order_by(*(GROUPED_ORDER if grouped else WORST_FIRST)), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
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
            "query": query.urlencode(),
            "errors": filterset.errors,
            "can_operate": request.user.has_perm(OPERATE),
            "states": AlertState.choices,
            "state": request.GET.get("state", AlertState.FIRING),
            "grouped": grouped,
            "group_toggle": toggle.urlencode(),
        },
    )


@require_POST
def alert_bulk_action(request: HttpRequest) -> HttpResponse:
    """Acknowledge or silence the alerts selected in the list, with one reason: one verb call per
    alert (own transaction, own history note), then one message with every alert's outcome."""
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not act on alerts.")
    verb = request.POST.get("action", "")
    if verb not in BULK_ACTIONS:
        return HttpResponse(f"Unknown bulk action {verb[:50]!r}.", status=400, content_type="text/plain")
    try:
        ids = selected_ids(request.POST)
    except SelectionRefused as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    # An alert this user cannot see is reported as unknown, never acted on nor described.
    visible = set(visible_alerts(request.user).filter(pk__in=ids).values_list("pk", flat=True))
    hidden = [Outcome(f"alert {pk}", done=False, why="no such alert") for pk in ids if pk not in visible]
    try:
        minutes = _minutes(request.POST.get("minutes")) if verb == "silence" else None
        outcomes = verbs.act_on_each(
            [pk for pk in ids if pk in visible],
            verb,
            actor=Actor(user=request.user),
            reason=request.POST.get("reason", ""),
            minutes=minutes,
        )
    except (ReasonRequired, ValueError) as exc:
        messages.error(request, f"{exc} Nothing was done.")
    else:
        done, refused = summary(outcomes + hidden, BULK_ACTIONS[verb])
        if done:
            messages.success(request, done)
        if refused:
            messages.error(request, refused)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "alert-list"
    return redirect(target)


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
