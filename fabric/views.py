"""Portal pages of the InfiniBand fabric, for staff only: the overview (topology, last run,
plan upload), discrepancies, tickets (operators close them), a port's page, manual checks.

Customers never see these pages (404): they see fabric findings on their own nodes' histories.
Every change goes through ``fabric.plan`` or ``fabric.services``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from nodes.models import OPERATE
from nodes.scoping import staff_only
from nodes.services import Actor
from nodewarden.errors import ReasonRequired

from . import charts, services
from .choices import KIND_COLOURS, DiscrepancyKind, RunStatus, TicketStatus, ValidationResult
from .filters import DiscrepancyFilterSet, TicketFilterSet, ValidationFilterSet
from .models import (
    CablingPlan,
    DiscoveredLink,
    DiscoveryRun,
    Discrepancy,
    FabricDevice,
    LinkFlap,
    ManualValidation,
    PlannedLink,
    PortCounterSnapshot,
    Ticket,
)
from .plan import PlanImportError, import_plan

PAGE_SIZE = 50
RUN_CHART_DAYS = 30
RUN_CHART_LIMIT = 720  # runs drawn at most (a run every hour for a month)
COUNTER_POINTS = 500  # snapshots drawn on a port's page, newest
PORT_ROWS = 50  # flaps and tickets listed on a port's page
TICKET_DISCREPANCIES = 100
PLAN_MAX_BYTES = 20 * 1024 * 1024


class PlanUploadForm(forms.Form):
    csv_file = forms.FileField(label="Cabling plan (CSV)")
    note = forms.CharField(required=False, max_length=1000)


class CloseTicketForm(forms.Form):
    reason = forms.CharField(max_length=300)


class ManualValidationForm(forms.Form):
    scope = forms.CharField(max_length=300, help_text='What was checked: "leaf-r3 optics".')
    result = forms.ChoiceField(choices=ValidationResult.choices)
    notes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=5000)


def _clean_query(request: HttpRequest, **defaults: str) -> QueryDict:
    """The GET filters with defaults; an empty form field means "any", not an invalid choice."""
    data = request.GET.copy()
    for key, value in defaults.items():
        data.setdefault(key, value)
    for key in list(data):
        values = [v for v in data.getlist(key) if v != ""]
        if values:
            data.setlist(key, values)
        else:
            del data[key]
    return data


def _page(request: HttpRequest, queryset: QuerySet[Any]) -> tuple[Any, str]:
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()


def port_urls(endpoints: Iterable[str]) -> dict[str, str]:
    """Each "device/port" endpoint's page, found with one query for all of them."""
    split = {e: e.rsplit("/", 1) for e in endpoints if e and "/" in e}
    ports = {e: (name, port) for e, (name, port) in split.items() if port.isdigit() and 0 < int(port) < 256}
    ids = dict(FabricDevice.objects.filter(name__in={n for n, _ in ports.values()}).values_list("name", "pk"))
    return {e: reverse("fabric-link", args=(ids[n], int(p))) for e, (n, p) in ports.items() if n in ids}


def _link_discrepancies(rows: list[Discrepancy]) -> list[Discrepancy]:
    urls = port_urls(e for d in rows for e in (d.a_endpoint, d.b_endpoint))
    for d in rows:
        # Display attributes for the template only, not fields of the model.
        d.a_url, d.b_url = urls.get(d.a_endpoint), urls.get(d.b_endpoint)  # type: ignore[attr-defined]
        d.colour = KIND_COLOURS.get(d.kind, "#888")  # type: ignore[attr-defined]
    return rows


# --- Overview ---------------------------------------------------------------------------------


def _overview_context(request: HttpRequest) -> dict[str, Any]:
    run, plan = services.last_run(), CablingPlan.objects.first()
    by_kind = (run.summary or {}).get("by_kind", {}) if run else {}
    since = timezone.now() - timedelta(days=RUN_CHART_DAYS)
    runs = (
        DiscoveryRun.objects.filter(status=RunStatus.DONE, started__gte=since)
        .order_by("-started", "-id")
        .values_list("started", "summary")[:RUN_CHART_LIMIT]
    )
    return {
        "run": run,
        "plan": plan,
        "can_operate": request.user.has_perm(OPERATE),
        "duration": (run.finished - run.started).total_seconds() if run and run.finished else None,
        "tiles": [
            {"kind": k, "label": k.label, "count": by_kind.get(k, 0), "colour": KIND_COLOURS[k]}
            for k in DiscrepancyKind
        ],
        "discrepancies": sum(by_kind.values()),
        "open_tickets": Ticket.objects.filter(status=TicketStatus.OPEN).count(),
        "topology_chart": charts.topology(run, plan),
        "runs_chart": charts.runs_over_time(reversed(list(runs))),
        "run_chart_days": RUN_CHART_DAYS,
        "upload_form": PlanUploadForm(),
    }


@staff_only
def overview(request: HttpRequest) -> HttpResponse:
    """The fabric at a glance: topology, last run's discrepancies, runs over time, plan, upload."""
    return render(request, "fabric/overview.html", _overview_context(request))


def _read_plan(upload: Any) -> str:
    if upload.size > PLAN_MAX_BYTES:
        raise PlanImportError([(1, f"the file is larger than {PLAN_MAX_BYTES // (1024 * 1024)} MB")])
    try:
        text: str = upload.read().decode("utf-8-sig")  # an UploadedFile (Any to its caller)
        return text
    except UnicodeDecodeError as exc:
        raise PlanImportError([(1, f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None


@staff_only
@require_POST
def plan_upload(request: HttpRequest) -> HttpResponse:
    """Import a cabling plan CSV; a bad file is refused with every bad line listed, nothing stored."""
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not import cabling plans.")
    form = PlanUploadForm(request.POST, request.FILES)
    errors: list[tuple[int, str]] = []
    if form.is_valid():
        upload = form.cleaned_data["csv_file"]
        try:
            plan = import_plan(
                _read_plan(upload), actor=Actor(user=request.user), source=upload.name, note=form.cleaned_data["note"]
            )
        except PlanImportError as exc:
            errors = exc.errors
        else:
            messages.success(request, f"Plan {plan.pk} imported: {plan.links} links; it is the plan in force.")
            return redirect("fabric-overview")
    context = {**_overview_context(request), "upload_form": form, "plan_errors": errors}
    return render(request, "fabric/overview.html", context, status=400)


# --- Discrepancies and tickets ---------------------------------------------------------------


@staff_only
def discrepancy_list(request: HttpRequest) -> HttpResponse:
    """What a run found (the last run unless one is picked), filtered by kind and endpoint."""
    queryset = Discrepancy.objects.select_related("run").order_by("kind", "a_endpoint", "id")
    filterset = DiscrepancyFilterSet(_clean_query(request), queryset=queryset, request=request)
    valid = filterset.is_valid()
    page, query = _page(request, filterset.qs if valid else queryset.none())
    _link_discrepancies(list(page.object_list))
    runs = DiscoveryRun.objects.filter(status=RunStatus.DONE).only("id", "started", "source")[:30]
    return render(
        request,
        "fabric/discrepancy_list.html",
        {
            "filterset": filterset,
            "errors": filterset.errors,
            "page": page,
            "query": query,
            "kinds": DiscrepancyKind.choices,
            "runs": runs,
            "last_run": services.last_run(),
            "selected_kinds": request.GET.getlist("kind"),
        },
    )


@staff_only
def ticket_list(request: HttpRequest) -> HttpResponse:
    """Technician tickets (open unless asked otherwise); operators close them with a reason."""
    # nodes: the hostnames on every row, one query for the page.
    queryset = Ticket.objects.prefetch_related("nodes").order_by("-opened_at", "-id")
    filterset = TicketFilterSet(_clean_query(request, status=TicketStatus.OPEN), queryset=queryset, request=request)
    valid = filterset.is_valid()
    page, query = _page(request, filterset.qs if valid else queryset.none())
    return render(
        request,
        "fabric/ticket_list.html",
        {
            "filterset": filterset,
            "errors": filterset.errors,
            "page": page,
            "query": query,
            "kinds": DiscrepancyKind.choices,
            "statuses": TicketStatus.choices,
            "status": request.GET.get("status", TicketStatus.OPEN),
            "selected_kinds": request.GET.getlist("kind"),
            "can_operate": request.user.has_perm(OPERATE),
        },
    )


@staff_only
def ticket_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One ticket: its ports, nodes, and what each run found (newest first)."""
    ticket = get_object_or_404(Ticket.objects.select_related("first_run", "last_run"), pk=pk)
    found = list(ticket.discrepancies.select_related("run").order_by("-run__started", "-id")[:TICKET_DISCREPANCIES])
    urls = port_urls(ticket.endpoints)
    return render(
        request,
        "fabric/ticket_detail.html",
        {
            "ticket": ticket,
            "discrepancies": _link_discrepancies(found),
            "nodes": ticket.nodes.order_by("hostname"),
            "endpoints": [(e, urls.get(e)) for e in ticket.endpoints],
            "can_operate": request.user.has_perm(OPERATE),
            "colour": KIND_COLOURS.get(ticket.kind, "#888"),
            "shown": TICKET_DISCREPANCIES,
        },
    )


@staff_only
@require_POST
def ticket_close(request: HttpRequest, pk: int) -> HttpResponse:
    """Close a ticket by hand, with a reason; the next run reopens it if the problem persists."""
    ticket = get_object_or_404(Ticket.objects.only("id", "status"), pk=pk)
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not close fabric tickets.")
    if ticket.status != TicketStatus.OPEN:
        messages.error(request, f"Ticket #{ticket.pk} is already closed.")
    else:
        try:
            services.close_ticket(ticket.pk, actor=Actor(user=request.user), reason=request.POST.get("reason", ""))
            messages.success(request, f"Ticket #{ticket.pk} closed.")
        except ReasonRequired as exc:
            messages.error(request, str(exc))
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("fabric-ticket", args=(ticket.pk,))
    return redirect(target)


# --- A port, and manual checks ---------------------------------------------------------------


def _touching(device: FabricDevice, port: int) -> Q:
    return Q(a_device=device, a_port=port) | Q(b_device=device, b_port=port)


def _peer(link: PlannedLink | DiscoveredLink | None, device: FabricDevice, port: int) -> str:
    if link is None:
        return ""
    if link.a_device_id == device.pk and link.a_port == port:
        return f"{link.b_device.name}/{link.b_port}" if link.b_device else ""  # no query when b_device_id is None
    return f"{link.a_device.name}/{link.a_port}"


@staff_only
def link_detail(request: HttpRequest, device_id: int, port: int) -> HttpResponse:
    """One port (one cable's end): planned and last-seen peer, counters over time, flaps, tickets."""
    device = get_object_or_404(FabricDevice.objects.select_related("node"), pk=device_id)
    if not 0 < port < 256:
        raise Http404("No such port")
    plan, run = CablingPlan.objects.first(), services.last_run()
    planned = (
        PlannedLink.objects.filter(_touching(device, port), plan=plan).select_related("a_device", "b_device").first()
        if plan
        else None
    )
    seen = (
        DiscoveredLink.objects.filter(_touching(device, port), run=run).select_related("a_device", "b_device").first()
        if run
        else None
    )
    snapshots = list(
        PortCounterSnapshot.objects.filter(device=device, port=port).order_by("-taken_at", "-id")[:COUNTER_POINTS]
    )[::-1]
    name = f"{device.name}/{port}"
    # A ticket's key lists its planned ports, "|"-separated: match the whole port, not "leaf01/1" in "leaf01/10".
    tickets = Ticket.objects.filter(Q(key__endswith=f"|{name}") | Q(key__contains=f"|{name}|")).order_by(
        "-opened_at", "-id"
    )[:PORT_ROWS]
    peers = {"planned": _peer(planned, device, port), "seen": _peer(seen, device, port)}
    urls = port_urls(peers.values())
    return render(
        request,
        "fabric/link_detail.html",
        {
            "device": device,
            "port": port,
            "name": name,
            "plan": plan,
            "run": run,
            "planned": planned,
            "seen": seen,
            "peers": {k: (v, urls.get(v)) for k, v in peers.items()},
            "counter_chart": charts.counter_history(snapshots),
            "latest": snapshots[-1] if snapshots else None,
            "flaps": LinkFlap.objects.filter(device=device, port=port).select_related("run")[:PORT_ROWS],
            "tickets": tickets,
            "points": COUNTER_POINTS,
            "rows": PORT_ROWS,
        },
    )


@staff_only
def validation_list(request: HttpRequest) -> HttpResponse:
    """The fabric team's hands-on checks; operators record one with the form."""
    form = ManualValidationForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not request.user.has_perm(OPERATE):
            return HttpResponseForbidden("You may not record fabric validations.")
        if form.is_valid():
            try:
                services.record_manual_validation(actor=Actor(user=request.user), **form.cleaned_data)
            except ReasonRequired as exc:
                form.add_error("scope", str(exc).replace("reason", "scope"))
            else:
                messages.success(request, "Validation recorded.")
                return redirect("fabric-validations")
    queryset = ManualValidation.objects.order_by("-created", "-id")
    filterset = ValidationFilterSet(_clean_query(request), queryset=queryset, request=request)
    page, query = _page(request, filterset.qs if filterset.is_valid() else queryset.none())
    return render(
        request,
        "fabric/validation_list.html",
        {
            "form": form,
            "page": page,
            "query": query,
            "filterset": filterset,
            "errors": filterset.errors,
            "results": ValidationResult.choices,
            "can_operate": request.user.has_perm(OPERATE),
        },
        status=400 if form.errors else 200,
    )
