"""Server-rendered pages: fleet overview, node list (with CSV export) and node detail.

Every queryset starts from ``nodes.scoping`` so customers see their tenant only;
every change goes through ``nodes.services``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseForbidden,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from django_htmx.middleware import HtmxDetails

from nodewarden import bulk, live, timerange
from nodewarden.bounds import timestamp_problem
from nodewarden.errors import ReasonRequired, TransitionForbidden

from . import charts, services, statecounts
from .choices import (
    PHASE_SHORT,
    STATE_COLOURS,
    STATE_PHASE,
    TROUBLE_STATES,
    EventKind,
    MaintenanceWork,
    NodeState,
    Phase,
)
from .counts import node_counts
from .filters import NodeFilterSet
from .history import HistoryFilter, HistoryKindForm, history_page
from .models import OPERATE, Node, NodeEvent, Run
from .scoping import is_operator_view, user_tenant_id, visible_events, visible_nodes
from .whyhere import why_here

LIST_PAGE_SIZE = 50
CHART_DAYS = 90
# The node page's live regions (element id -> its template), refreshed by static/js/live.js.
NODE_LIVE_FRAGMENTS = {"why-here": "nodes/_why_here.html", "node-gpus": "nodes/_gpus.html"}
STATE_CHANGES = (EventKind.TRANSITION, EventKind.FORCED)


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it (``request.htmx``)."""

    htmx: HtmxDetails


@login_required
def fleet_overview(request: HtmxHttpRequest) -> HttpResponse:
    """Counts by state, by site and cluster, recent changes, and counts over time."""
    nodes = visible_nodes(request.user)
    counts = node_counts(nodes)
    tiles = [
        {
            "state": s,
            "label": s.label,
            "count": counts.by_state[s],
            "colour": STATE_COLOURS[s],
            "trouble": s in TROUBLE_STATES,
        }
        for s in NodeState
    ]
    recent = (
        visible_events(request.user)
        .filter(kind__in=STATE_CHANGES)
        .only("id", "node_id", "hostname", "created", "source_state", "target_state", "actor_name", "reason", "kind")[
            :15
        ]
    )
    context = {
        "tiles": tiles,
        "total": counts.total,
        "in_trouble": counts.in_trouble,
        "in_maintenance": counts.in_maintenance,
        "recent": recent,
        "by_cluster": _counts_by_cluster(nodes),
        "phases": [(PHASE_SHORT[p], p.label) for p in Phase],
    }
    if request.htmx:
        return render(request, "nodes/_overview_live.html", context)
    try:
        window = timerange.from_request(request, default=f"{CHART_DAYS}d")
    except timerange.BadRange as exc:
        return timerange.bad_request(exc)
    # Per day, not per hour: 90 days of hourly snapshots are 3,000 points a state (and rows to read);
    # a range of hours is drawn snapshot by snapshot, where a day would be a single point.
    scope = {} if is_operator_view(request.user) else {"tenant_id": user_tenant_id(request.user)}
    x_range = (window.start, window.end)
    if window.span <= statecounts.HOURLY_SPAN:
        snapshots = statecounts.snapshot_counts(window.start, window.end, scope=scope)
        context["counts_chart"] = charts.state_counts_per_snapshot(snapshots, x_range=x_range)
    else:
        days = statecounts.daily_counts(window.start, window.end, scope=scope)
        context["counts_chart"] = charts.state_counts_over_time(days, x_range=x_range)
    context.update(timerange.picker_context(request, window))
    return render(request, "nodes/overview.html", context)


def _counts_by_cluster(nodes: QuerySet[Node]) -> list[dict[str, Any]]:
    """One row per (site, cluster) with node counts per phase."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in nodes.values("site__name", "site__slug", "cluster__name", "state").annotate(n=Count("id")).order_by():
        key = (r["site__name"], r["cluster__name"] or "")
        row = rows.setdefault(
            key,
            {
                "site": r["site__name"],
                "site_slug": r["site__slug"],
                "cluster": r["cluster__name"] or "",
                "total": 0,
                "trouble": 0,
                "phases": dict.fromkeys(Phase.values, 0),
            },
        )
        row["phases"][STATE_PHASE[r["state"]]] += r["n"]
        row["total"] += r["n"]
        row["trouble"] += r["n"] if r["state"] in TROUBLE_STATES else 0
    for row in rows.values():
        row["phases"] = list(row["phases"].values())  # in Phase order, as the table's columns
    return [rows[k] for k in sorted(rows)]


def _filtered(request: HttpRequest) -> NodeFilterSet:
    queryset = visible_nodes(request.user).select_related("site", "cluster", "tenant", "hardware_profile")
    # The filter form submits every field; an empty one means "any", not an invalid choice.
    data = request.GET.copy()
    for key in list(data):
        values = [v for v in data.getlist(key) if v != ""]
        if values:
            data.setlist(key, values)
        else:
            del data[key]
    return NodeFilterSet(data or None, queryset=queryset, request=request)


@login_required
def node_list(request: HttpRequest) -> HttpResponse:
    """Searchable, filterable, sortable, paginated node list; filters live in the URL."""
    filterset = _filtered(request)
    queryset = filterset.qs if filterset.is_bound and filterset.is_valid() else filterset.queryset
    if queryset.query.order_by:
        # A stable tie-breaker keeps pages consistent when sorting by state, site, ...
        queryset = queryset.order_by(*queryset.query.order_by, "hostname")
    page = Paginator(queryset, LIST_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        live.template_for(request, "nodes/list.html", {"node-rows": "nodes/_list_rows.html"}),
        {
            "filterset": filterset,
            "page": page,
            "query": query.urlencode(),
            "sort": request.GET.get("ordering", ""),
            "errors": filterset.errors if filterset.is_bound else {},
            "can_operate": request.user.has_perm(OPERATE),
            # Declared once each in the registry (remediation.bulk registers the node list's).
            "bulk_actions": bulk.actions_for("nodes", request.user),
        },
    )


@login_required
@require_POST
def node_bulk_action(request: HttpRequest) -> HttpResponse:
    """Run one of the node list's bulk actions, with one reason, on the selected nodes: the
    registry's verb once per node (own transaction, own history row), then one message naming
    every node's outcome (``nodewarden.bulk.run``)."""

    def visible(ids: list[int]) -> set[int]:
        return set(visible_nodes(request.user).filter(pk__in=ids).values_list("pk", flat=True))

    return bulk.run(request, "nodes", visible=visible, noun="node", back="node-list")


@login_required
def node_export_csv(request: HttpRequest) -> HttpResponseBase:
    """The current view of the node list as CSV (same filters, no pagination)."""
    filterset = _filtered(request)
    if filterset.is_bound and not filterset.is_valid():
        return HttpResponse(f"Invalid filter: {filterset.errors.as_text()}", status=400, content_type="text/plain")
    queryset = filterset.qs if filterset.is_bound else filterset.queryset

    class Echo:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(Echo())
    header = [
        "hostname",
        "serial",
        "state",
        "state_since",
        "site",
        "cluster",
        "tenant",
        "hardware_profile",
        "bmc_address",
    ]

    def rows() -> Iterator[str]:
        yield writer.writerow(header)
        for n in queryset.iterator(chunk_size=500):
            yield writer.writerow(
                [
                    n.hostname,
                    n.serial,
                    n.state,
                    n.state_changed_at.isoformat(),
                    n.site.name,
                    n.cluster.name if n.cluster else "",
                    n.tenant.name if n.tenant else "",
                    n.hardware_profile.name,
                    n.bmc_address,
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="nodes.csv"'
    return response


def _visible_node_or_404(request: HttpRequest, pk: int) -> Node:
    return get_object_or_404(
        visible_nodes(request.user).select_related("site", "cluster", "rack", "tenant", "hardware_profile", "persona"),
        pk=pk,
    )


@login_required
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One node's life: state, inventory, actions, timeline, lifecycle graph and history."""
    node = _visible_node_or_404(request, pk)
    gpus = list(node.gpus.all())
    live_parts: dict[str, Any] = {
        "node": node,
        "gpus": gpus,
        "usable_gpus": services.usable_gpu_count(gpus),
        "can_note": request.user.has_perm("nodes.operate_node"),
        "why": why_here(node, operator=is_operator_view(request.user)),
        "maintenance_work": MaintenanceWork.choices,
    }
    fragment = live.wanted_fragment(request, NODE_LIVE_FRAGMENTS)
    if fragment:  # a live refresh of one part: no charts, no history
        return render(request, fragment, live_parts)
    try:
        window = _node_window(request, node)
    except timerange.BadRange as exc:
        return timerange.bad_request(exc)
    history_form, where = _history_filter(request, window)
    changes = list(
        NodeEvent.objects.filter(node=node, kind__in=STATE_CHANGES)
        .only("created", "source_state", "target_state", "transition")
        .order_by("created", "id")[:1000]
    )
    return render(
        request,
        "nodes/detail.html",
        {
            **live_parts,
            "transitions": services.available_transitions(node, request.user),
            "timeline_chart": charts.state_timeline(node, changes, x_range=(window.start, window.end)),
            "graph_chart": charts.lifecycle_graph(changes, node.state),
            "history": history_page(node, where=where),
            "history_form": history_form,
            "history_query": _history_query(history_form, window),
            **timerange.picker_context(request, window, with_all=True, drop=OLD_HISTORY_RANGE),
        },
    )


# The history filter's own names for a time range before the page took the shared one
# (nodewarden/timerange.py): old links keep working, read as from/to.
OLD_HISTORY_RANGE = ("since", "until")


def _node_window(request: HttpRequest, node: Node) -> timerange.TimeRange:
    """The node page's one time range, for its state timeline and its history.

    The shared ``?range=``/``?from=&to=``, where ``all`` (the default) is the node's life, at most
    a year back. The history filter's old ``?since=&until=`` are read as ``from``/``to``.
    """
    origin = min(filter(None, (node.created, _first_record(node))))
    params = {key: request.GET.get(key, "") for key in timerange.PARAMS}
    if not params["from"] and not params["to"]:
        params["from"], params["to"] = request.GET.get("since", ""), request.GET.get("until", "")
        if params["to"] and not params["from"]:  # "until" alone meant "the node's life up to then"
            since = max(origin, timezone.now() - timerange.MAX_SPAN + timedelta(minutes=1))
            params["from"] = since.strftime("%Y-%m-%dT%H:%M:%S")
    return timerange.parse(params, default=timerange.ALL, origin=origin)


def _first_record(node: Node) -> datetime | None:
    """When the node's first event or run was recorded (imported history can predate the row)."""
    first = NodeEvent.objects.filter(node=node).order_by("created").values_list("created", flat=True).first()
    run = Run.objects.filter(node=node).order_by("created").values_list("created", flat=True).first()
    return min(filter(None, (first, run)), default=None)


def _history_filter(request: HttpRequest, window: timerange.TimeRange) -> tuple[HistoryKindForm, HistoryFilter]:
    """The history's kind filter from the GET parameters, in the page's time range; an invalid kind
    filters nothing but the range (the form says why)."""
    form = HistoryKindForm(request.GET if "kind" in request.GET else None)
    kind = form.cleaned_data.get("kind", "") if form.is_bound and form.is_valid() else ""
    return form, HistoryFilter(kind=kind, since=window.start, until=window.end)


def _history_query(form: HistoryKindForm, window: timerange.TimeRange) -> str:
    """The range and the valid kind as GET parameters, carried by the "older history" button."""
    query = QueryDict(mutable=True)
    if form.is_bound and form.is_valid() and form.cleaned_data.get("kind"):
        query["kind"] = form.cleaned_data["kind"]
    query.update(window.params())
    return query.urlencode()


@login_required
def node_history(request: HttpRequest, pk: int) -> HttpResponse:
    """One more page of merged history (htmx partial)."""
    node = _visible_node_or_404(request, pk)
    before = _parse_cursor(request.GET.get("before", ""))
    try:
        window = _node_window(request, node)
    except timerange.BadRange as exc:
        return timerange.bad_request(exc)
    form, where = _history_filter(request, window)
    if form.is_bound and not form.is_valid():
        return HttpResponse(f"Invalid history filter: {form.errors.as_text()}", status=400, content_type="text/plain")
    context = {
        "node": node,
        "history": history_page(node, before, where=where),
        "history_query": _history_query(form, window),
    }
    return render(request, "nodes/_history_rows.html", context)


def _parse_cursor(raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        parsed = parse_datetime(raw)
    except ValueError:  # well formed but impossible, such as month 13
        parsed = None
    if parsed is None or timestamp_problem(parsed) is not None:
        raise Http404("Bad history cursor")
    return parsed


@login_required
@require_POST
def node_transition(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    """Run a lifecycle transition from the node page's buttons."""
    node = _visible_node_or_404(request, pk)
    try:
        services.perform(node.pk, name, actor=services.Actor(user=request.user), reason=request.POST.get("reason", ""))
    except TransitionForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except ReasonRequired as exc:
        messages.error(request, str(exc))
    except (TransitionNotAllowed, ConcurrentTransition) as exc:
        messages.error(request, str(exc))
    else:
        node.refresh_from_db()
        messages.success(request, f"{node.hostname} is now {node.get_state_display()}.")
    return redirect("node-detail", pk=node.pk)


@login_required
@require_POST
def node_end_maintenance(request: HttpRequest, pk: int) -> HttpResponse:
    """End a node's maintenance from the node page: what was done picks the re-validation plan."""
    node = _visible_node_or_404(request, pk)
    try:
        services.end_maintenance(
            node.pk,
            actor=services.Actor(user=request.user),
            reason=request.POST.get("reason", ""),
            work=request.POST.get("work", ""),
        )
    except TransitionForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except (ReasonRequired, ValueError, TransitionNotAllowed, ConcurrentTransition) as exc:
        messages.error(request, str(exc))
    else:
        node.refresh_from_db()
        messages.success(request, f"{node.hostname}: maintenance ended, re-validating ({node.get_state_display()}).")
    return redirect("node-detail", pk=node.pk)


@login_required
@require_POST
def node_note(request: HttpRequest, pk: int) -> HttpResponse:
    """Add an operator note to the node's history."""
    node = _visible_node_or_404(request, pk)
    if not request.user.has_perm("nodes.operate_node"):
        return HttpResponseForbidden("You may not add notes to nodes.")
    try:
        services.record_event(
            node.pk, EventKind.NOTE, actor=services.Actor(user=request.user), reason=request.POST.get("reason", "")
        )
    except ReasonRequired as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Note added.")
    return redirect("node-detail", pk=node.pk)


# The node page's per-GPU buttons: verb in the URL -> the service that carries it out.
GPU_ACTIONS = {"fence": services.fence_gpu, "clear": services.clear_gpu}


@login_required
@require_POST
def node_gpu_action(request: HttpRequest, pk: int, index: int, verb: str) -> HttpResponse:
    """Fence or clear one GPU from the node page (operate permission, a reason required)."""
    node = _visible_node_or_404(request, pk)
    action = GPU_ACTIONS.get(verb)
    if action is None or not node.gpus.filter(index=index).exists():
        raise Http404("No such GPU action")
    try:
        action(node.pk, index, actor=services.Actor(user=request.user), reason=request.POST.get("reason", ""))
    except TransitionForbidden as exc:
        return HttpResponseForbidden(str(exc))
    except (ReasonRequired, TransitionNotAllowed) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"GPU {index} of {node.hostname}: {'fenced' if verb == 'fence' else 'cleared'}.")
    return redirect("node-detail", pk=node.pk)
