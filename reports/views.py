"""Report pages: the fleet's dashboards for staff (availability, time to recover, failures, Day 1
yield, downtime by attribution, the lifecycle flow and the nodes behind each flow), a tenant's
availability (customers see their own; staff pick a tenant) with its CSV files, and the
Prometheus metrics endpoint.

Every queryset starts from ``nodes.scoping``; every read is a fixed number of queries.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from fleet.models import Cluster, Tenant
from health.models import Finding
from nodes import statecounts
from nodes.choices import NodeState
from nodes.models import Node, NodeEvent
from nodes.scoping import is_operator_view, staff_only, user_tenant_id, visible_nodes, visible_tenants
from nodewarden import timerange
from nodewarden.throttling import AuthFailureThrottle, too_many_failures_response
from remediation.models import Remediation
from validation.summary import day1_yield

from . import availability, charts, flows, metrics, outages, settled, summary
from .filters import Period, ReportForm

PAGE_SIZE = 50


def _form(request: HttpRequest, *, drop: tuple[str, ...] = ()) -> ReportForm:
    """The report form bound to the URL's parameters; empty ones mean "any" (or the default period)."""
    data = QueryDict(mutable=True)
    for key in request.GET:
        values = [v for v in request.GET.getlist(key) if v != ""]
        if values and key not in drop:
            data.setlist(key, values)
    # The portal's shared time range (a zoom on a chart, a link from another chart page) wins over
    # the report's own period fields: it becomes the exact since/until it names.
    problem = None
    if any(request.GET.get(key) for key in timerange.PARAMS):
        try:
            window = timerange.from_request(request)
        except timerange.BadRange as exc:
            problem = str(exc)
        else:
            for key in ("days", "since", "until"):
                data.pop(key, None)
            data["since"], data["until"] = window.start.isoformat(), window.end.isoformat()
    form = ReportForm(data)
    form.is_valid()
    if problem:
        form.add_error(None, problem)
    return form


# The report's own names for its period, replaced in links by the shared picker's range (old
# ?days= links still work: _form reads them) and the pages a new range restarts.
OWN_PERIOD = ("days", "since", "until", "ipage")


def _picker(request: HttpRequest, period: Period) -> dict[str, object]:
    """The shared time-range picker (``_timerange.html``) showing the report's period.

    A preset is named as the shared vocabulary says it (``?days=7`` is ``7d``); an exact period
    (a zoom, an old since/until link) is a custom window."""
    asked = request.GET.get("range", "")
    preset = asked if asked in timerange.PRESETS else (f"{period.days}d" if period.days else None)
    chosen = timerange.TimeRange(period.since, period.until, preset if preset in timerange.PRESETS else None)
    return timerange.picker_context(request, chosen, drop=OWN_PERIOD)


def _bad(request: HttpRequest, form: ReportForm, template: str) -> HttpResponse:
    return render(request, template, {"form": form, "errors": form.errors}, status=400)


def _query(request: HttpRequest, *drop: str) -> str:
    query = request.GET.copy()
    for key in drop:
        query.pop(key, None)
    return query.urlencode()


# --- The fleet's dashboards (staff) --------------------------------------------------------------


class ScopeIds(TypedDict):
    """The scope as lookups: None where the report is not narrowed."""

    cluster_id: int | None
    tenant_id: int | None


@dataclass(frozen=True)
class FleetScope:
    """The rows a fleet report reads: every node's, or one cluster's and/or one tenant's."""

    period: Period
    cluster: Cluster | None
    tenant: Tenant | None

    @property
    def ids(self) -> ScopeIds:
        return {
            "cluster_id": self.cluster.pk if self.cluster else None,
            "tenant_id": self.tenant.pk if self.tenant else None,
        }

    def nodes(self) -> QuerySet[Node]:
        return Node.objects.filter(**{k: v for k, v in self.ids.items() if v is not None})

    def scoped_nodes(self) -> QuerySet[Node] | None:
        """The scope's nodes, or None for the whole fleet (readers then skip the filter on nodes)."""
        return self.nodes() if (self.cluster or self.tenant) else None

    def of_nodes(self, model: type[Any]) -> QuerySet[Any]:
        """Rows of a model with a ``node``, of the scope's nodes (all rows, unfiltered, for the fleet)."""
        rows: QuerySet[Any] = (
            model.objects.filter(node__in=self.nodes()) if (self.cluster or self.tenant) else model.objects.all()
        )
        return rows

    def transition_counts(self) -> list[dict[str, Any]]:
        """The period's flows: the fleet's from the daily roll-up, a cluster's or tenant's from the changes."""
        if self.cluster or self.tenant:
            return flows.transition_counts(flows.state_changes(NodeEvent.objects.all(), self.period, **self.ids))
        return flows.fleet_transition_counts(self.period)

    def flow_link(self, source: str, target: str) -> str:
        """The list of the nodes behind one band of the flow, for exactly this period and scope."""
        return (
            reverse("report-flows")
            + "?"
            + self.period.query(
                source=source,
                target=target,
                cluster=self.cluster.name if self.cluster else "",
                tenant=self.tenant.slug if self.tenant else "",
            )
        )


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """The fleet's reports for a period, optionally for one cluster and/or tenant."""
    form = _form(request)
    if form.errors:
        return _bad(request, form, "reports/overview.html")
    scope = FleetScope(form.period(), form.cleaned_data.get("cluster"), form.cleaned_data.get("tenant"))
    period, remediations = scope.period, scope.of_nodes(Remediation)
    transitions = scope.transition_counts()
    for flow in transitions:
        flow["url"] = scope.flow_link(flow["source"], flow["target"])
    # The settled days' figures come from the cache (``settled``); the generation is read before any
    # row, so figures a concurrent write changes are stored where no reader looks.
    generation, ids = settled.generation(), {"cluster_id": scope.ids["cluster_id"], "tenant_id": scope.ids["tenant_id"]}
    days = settled.settled_days(period.since, period.until)
    causes = settled.failure_causes(scope.of_nodes(Finding), ids, days, generation)
    hours = settled.availability(ids, period.since, period.until, generation)
    downtime = settled.downtime(outages.Scope(**scope.ids), ids, days, generation)
    span = (period.since, period.until)
    return render(
        request,
        "reports/overview.html",
        {
            "form": form,
            "period": period,
            **_picker(request, period),
            "cluster": scope.cluster,
            "tenant": scope.tenant,
            "availability_clusters": charts.availability_over_time(hours["cluster__name"], span),
            "availability_tenants": charts.availability_over_time(hours["tenant__name"], span),
            "mttr": settled.mttr(remediations, ids, days, generation),
            "causes": causes,
            "components": summary.failures_by_component(causes),
            "causes_chart": charts.failure_causes(causes),
            "rungs": summary.remediations_by_rung(remediations, period),
            "day1": day1_yield(scope.scoped_nodes(), now=period.until),
            "downtime": downtime,
            "downtime_chart": charts.downtime_by_cluster(downtime),
            "flows": transitions,
            "flow_total": sum(f["count"] for f in transitions),
            "sankey": charts.lifecycle_sankey(transitions, scope.flow_link),
        },
    )


@staff_only
def flow_nodes(request: HttpRequest) -> HttpResponse:
    """The nodes that made one transition (source -> target) in the period, paged."""
    form = _form(request, drop=("source", "target", "page"))
    source, target = request.GET.get("source", ""), request.GET.get("target", "")
    if source not in NodeState.values or target not in NodeState.values:
        form.add_error(None, "Give a source and a target state.")
    if form.errors:
        return _bad(request, form, "reports/flows.html")
    period, cluster, tenant = form.period(), form.cleaned_data.get("cluster"), form.cleaned_data.get("tenant")
    events = flows.state_changes(
        NodeEvent.objects.all(),
        period,
        cluster_id=cluster.pk if cluster else None,
        tenant_id=tenant.pk if tenant else None,
    )
    page = Paginator(flows.flow_nodes(events, source, target), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "reports/flows.html",
        {
            "form": form,
            "period": period,
            "cluster": cluster,
            "tenant": tenant,
            "page": page,
            "source": NodeState(source),
            "target": NodeState(target),
            "query": _query(request, "page"),
        },
    )


# --- A tenant's availability ---------------------------------------------------------------------


def _tenant(request: HttpRequest) -> Tenant | None:
    """The tenant asked for (``?tenant=``), or the customer's own; None for staff who named none.
    A tenant the user may not see, or none at all for a customer, answers 404."""
    tenants = visible_tenants(request.user)
    slug = request.GET.get("tenant", "")
    if slug:
        return get_object_or_404(tenants, slug=slug)
    if is_operator_view(request.user):
        return None
    tenant_id = user_tenant_id(request.user)
    if tenant_id is None:
        raise Http404("No tenant")
    return get_object_or_404(tenants, pk=tenant_id)


def _tenant_nodes(request: HttpRequest, tenant: Tenant) -> Any:
    # cluster: the cluster column of every row.
    return visible_nodes(request.user).filter(tenant=tenant).select_related("cluster").order_by("hostname")


@login_required
def tenant_availability(request: HttpRequest) -> HttpResponse:
    """Per node, time in production, incidents and downtime, then the incidents; both paged."""
    form = _form(request, drop=("tenant", "page", "ipage"))
    tenant = _tenant(request)
    if tenant is None:
        return render(request, "reports/availability.html", {"form": form, "tenants": Tenant.objects.order_by("name")})
    if form.errors:
        return _bad(request, form, "reports/availability.html")
    period = form.period()
    nodes = availability.with_state_at(_tenant_nodes(request, tenant), period)
    page = Paginator(nodes, PAGE_SIZE).get_page(request.GET.get("page"))
    listed = availability.IncidentList(
        outages.Scope(tenant_id=tenant.pk), period, page=_page_number(request, "ipage"), page_size=PAGE_SIZE
    )
    # Paginator counts with IncidentList.count() and slices it; the stubs ask for a whole Sequence.
    incidents: Page[availability.Incident] = Paginator(listed, PAGE_SIZE).get_page(  # type: ignore[arg-type]
        request.GET.get("ipage")
    )
    counts = statecounts.daily_counts(
        period.since,
        period.until,
        by="tenant__name",
        scope={"tenant_id": tenant.pk},
        buckets=charts.AVAILABILITY_BUCKETS,
    )
    return render(
        request,
        "reports/availability.html",
        {
            "form": form,
            "period": period,
            **_picker(request, period),
            "tenant": tenant,
            "staff": is_operator_view(request.user),
            "page": page,
            "rows": availability.node_availability(list(page.object_list), period),
            "incidents": incidents,
            "downtime": summary.downtime_totals(listed.totals()),
            "chart": charts.availability_over_time(counts, (period.since, period.until)),
            "query": _query(request, "page"),
            "iquery": _query(request, "ipage"),
            "csv_query": period.query(tenant=tenant.slug),
        },
    )


def _page_number(request: HttpRequest, name: str) -> int:
    """The page number asked for (1 when missing or malformed, as ``Paginator.get_page`` reads it)."""
    try:
        return max(int(request.GET.get(name, "1")), 1)
    except ValueError:
        return 1


def _csv(rows: Iterable[list[Any]], filename: str) -> StreamingHttpResponse:
    class Echo:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(Echo())
    response = StreamingHttpResponse((writer.writerow(row) for row in rows), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _hours(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 3600:.2f}"


def _csv_setup(request: HttpRequest) -> tuple[Tenant, Period] | HttpResponse:
    form = _form(request, drop=("tenant",))
    tenant = _tenant(request)
    if tenant is None:
        return HttpResponseBadRequest("Give a tenant (?tenant=<slug>).", content_type="text/plain")
    if form.errors:
        return HttpResponseBadRequest(f"Invalid parameters: {form.errors.as_text()}", content_type="text/plain")
    return tenant, form.period()


@login_required
def availability_csv(request: HttpRequest) -> HttpResponseBase:
    """Every node of the tenant: the availability table as CSV, computed 500 nodes at a time."""
    setup = _csv_setup(request)
    if isinstance(setup, HttpResponse):
        return setup
    tenant, period = setup
    nodes = availability.with_state_at(_tenant_nodes(request, tenant), period)

    def rows() -> Iterator[list[Any]]:
        yield [
            "hostname",
            "cluster",
            "state",
            "production_hours",
            "downtime_hours",
            "provider_downtime_hours",
            "customer_downtime_hours",
            "incidents",
            "availability_pct",
            "since",
            "until",
        ]
        for start in range(0, nodes.count(), availability.CHUNK):
            for r in availability.node_availability(list(nodes[start : start + availability.CHUNK]), period):
                yield [
                    r.node.hostname,
                    r.node.cluster.name if r.node.cluster else "",
                    r.node.state,
                    _hours(r.serving_s),
                    _hours(r.downtime_s),
                    _hours(r.provider_s),
                    _hours(r.customer_s),
                    r.incidents,
                    "" if r.availability_pct is None else r.availability_pct,
                    period.since.isoformat(),
                    period.until.isoformat(),
                ]

    return _csv(rows(), f"availability-{tenant.slug}.csv")


@login_required
def incidents_csv(request: HttpRequest) -> HttpResponseBase:
    """Every incident of the tenant in the period as CSV, newest first."""
    setup = _csv_setup(request)
    if isinstance(setup, HttpResponse):
        return setup
    tenant, period = setup

    def rows() -> Iterator[list[Any]]:
        yield [
            "hostname",
            "left_production",
            "back_in_production",
            "hours_until_back",
            "downtime_hours_in_period",
            "attribution",
            "initiated_by",
            "finding",
            "reason",
        ]
        for i in availability.IncidentList(outages.Scope(tenant_id=tenant.pk), period):
            back = i.until_back
            yield [
                i.hostname,
                i.started.isoformat(),
                i.ended.isoformat() if i.ended else "",
                _hours(back.total_seconds()) if back else "",
                _hours(i.outage.seconds),
                i.attribution,
                i.outage.initiated_by,
                i.finding["summary"] if i.finding else "",
                i.reason,
            ]

    return _csv(rows(), f"incidents-{tenant.slug}.csv")


# --- Prometheus ----------------------------------------------------------------------------------


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """The fleet's metrics in the Prometheus text format (bearer token, staff, or a scrape network)."""
    throttle = AuthFailureThrottle()
    if throttle.locked_out(request):
        return too_many_failures_response(throttle)
    if not metrics.allowed(request, throttle):
        response = HttpResponse(
            "Metrics need a bearer token (NODEWARDEN_METRICS_TOKEN), a staff session or a "
            "client in NODEWARDEN_METRICS_NETWORKS.\n",
            status=401 if metrics.metrics_token() else 403,
            content_type="text/plain",
        )
        if metrics.metrics_token():
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # Every name is plain ASCII, so the text is the classic 0.0.4 format that every Prometheus reads.
    return HttpResponse(generate_latest(metrics.registry()), content_type=CONTENT_TYPE_PLAIN_0_0_4)
