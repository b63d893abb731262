"""Portal views of the checks app: the node page's "Active checks" partial and its request form, and
the fleet's check freshness page (staff only)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from fleet.models import HardwareProfile
from nodes.choices import ACTIVE_KINDS, RUN_STATUS_COLOURS, NodeState, RunKind
from nodes.models import OPERATE, Run
from nodes.scoping import staff_only, visible_node_or_404
from nodes.services import Actor
from nodewarden.errors import ReasonRequired

from . import freshness, services

RECENT_RUNS = 10
STALEST_SHOWN = 50


def node_checks(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's "Active checks" partial (loaded with htmx): recent runs, and for
    operators the request form and whether the node counts as idle now."""
    node = visible_node_or_404(request.user, pk)
    runs = list(
        Run.objects.filter(node=node, kind__in=ACTIVE_KINDS)
        .select_related("requested_by")
        .defer("output")
        .order_by("-created", "-id")[:RECENT_RUNS]
    )
    for run in runs:
        run.colour = RUN_STATUS_COLOURS.get(run.status, "#888")  # type: ignore[attr-defined]  # for the template only
    can_request = request.user.has_perm(OPERATE) and node.state not in services.NO_CHECK_STATES
    context = {
        "node": node,
        "runs": runs,
        "can_request": can_request,
        "kinds": [(kind, RunKind(kind).label) for kind in ACTIVE_KINDS],
    }
    if can_request:
        context["idle"], context["idle_reason"] = services.node_is_idle(node)
    return render(request, "checks/_node_checks.html", context)


@login_required
@require_POST
def node_check_request(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue an active check from the node page's form (default params), then back to the node."""
    node = visible_node_or_404(request.user, pk)
    if not request.user.has_perm(OPERATE):
        return HttpResponseForbidden("You may not request checks on nodes.")
    kind = request.POST.get("kind", "")
    try:
        run = services.request_check(
            node.pk, kind, actor=Actor(user=request.user), reason=request.POST.get("reason", "")
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except (ReasonRequired, services.CheckConflict) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{run.get_kind_display()} queued; the agent runs it when the node is idle.")
    return redirect("node-detail", pk=node.pk)


@staff_only
def check_freshness(request: HttpRequest) -> HttpResponse:
    """How fresh the production fleet's active checks are: coverage per cluster and per profile,
    each profile's targets, and the stalest nodes (a fixed number of queries)."""
    items = freshness.fleet_freshness(timezone.now())
    profiles = {p.pk: p.name for p in HardwareProfile.objects.filter(nodes__state=NodeState.PRODUCTION).distinct()}
    owed = freshness.targets(profiles)
    stalest = sorted((i for i in items if i.due), key=lambda i: i.staleness, reverse=True)[:STALEST_SHOWN]
    return render(
        request,
        "checks/freshness.html",
        {
            "kinds": [(kind, RunKind(kind).label) for kind in ACTIVE_KINDS],
            "overall": freshness.coverage(items, "fleet")[0] if items else None,
            "clusters": _with_stale_counts(freshness.coverage(items, "cluster")),
            "profiles": _with_stale_counts(freshness.coverage(items, "profile")),
            "targets": sorted(
                (profiles[pk], [(RunKind(kind).label, freshness.short_age(age)) for kind, age in sorted(kinds.items())])
                for pk, kinds in owed.items()
            ),
            "stalest": stalest,
            "share": settings.NODEWARDEN_FRESHNESS_SHARE,
        },
    )


def _with_stale_counts(shares: list[freshness.Share]) -> list[tuple[freshness.Share, list[int]]]:
    """Each share with its stale node counts in ACTIVE_KINDS order (the table's columns)."""
    return [(share, [share.stale_by_kind.get(kind, 0) for kind in ACTIVE_KINDS]) for share in shares]
