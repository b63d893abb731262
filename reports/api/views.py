"""REST endpoints of the reports: a tenant's availability per node with its incidents (scoped
like the pages: a tenant the caller may not see answers 404) and the lifecycle flow."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.models import Cluster, Tenant
from nodes.api.serializers import DetailSerializer
from nodes.scoping import is_operator_view, user_tenant_id, visible_events, visible_nodes, visible_tenants
from nodewarden.api import Pagination

from .. import availability, flows
from ..filters import Period, period_of
from . import serializers

NOT_FOUND = OpenApiResponse(DetailSerializer, description="No such tenant visible to the caller.")
BAD = OpenApiResponse(description="A malformed period or parameter.")
PAGE = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="Nodes per page (default 50)."),
    OpenApiParameter("offset", OpenApiTypes.INT, description="Nodes to skip."),
]


def _query(request: Request) -> tuple[dict[str, Any], Period]:
    query = serializers.ReportQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    data = query.validated_data
    return data, period_of(data.get("since"), data.get("until"), None)


def _tenant(request: Request, slug: str | None) -> Tenant | None:
    """The tenant named (404 unless visible), else the customer's own; None: staff, every tenant."""
    tenants = visible_tenants(request.user)
    if slug:
        return get_object_or_404(tenants, slug=slug)
    if is_operator_view(request.user):
        return None
    return get_object_or_404(tenants, pk=user_tenant_id(request.user) or 0)


class AvailabilityView(APIView):
    """Per node of a tenant (a page of them), time in production, downtime and incidents in a period."""

    @extend_schema(
        summary="Availability per node, with incidents, for a period",
        parameters=[serializers.ReportQuerySerializer, *PAGE],
        responses={200: serializers.AvailabilityReportSerializer, 400: BAD, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        data, period = _query(request)
        tenant = _tenant(request, data.get("tenant"))
        nodes = visible_nodes(request.user).select_related("cluster").order_by("hostname")
        if tenant is not None:
            nodes = nodes.filter(tenant=tenant)
        if data.get("cluster"):
            nodes = nodes.filter(cluster__name=data["cluster"])
        pager = Pagination()  # the project's: bounded limit and offset
        page = pager.paginate_queryset(availability.with_state_at(nodes, period), request, view=self) or []
        rows = availability.node_availability(page, period)
        by_node: dict[int, list[availability.Incident]] = defaultdict(list)
        for incident in availability.incidents([o for row in rows for o in row.node_outages]):
            by_node[incident.node_id].append(incident)
        body = {
            "since": period.since,
            "until": period.until,
            "tenant": tenant.slug if tenant else None,
            "count": pager.count,
            "next": pager.get_next_link(),
            "previous": pager.get_previous_link(),
            "results": rows,
        }
        return Response(serializers.AvailabilityReportSerializer(body, context={"incidents": by_node}).data)


class FlowsView(APIView):
    """How many state changes went from each state to each other in a period (the caller's nodes)."""

    @extend_schema(
        summary="Lifecycle flow: state changes per (source, target) in a period",
        parameters=[serializers.ReportQuerySerializer],
        responses={200: serializers.FlowReportSerializer, 400: BAD, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        data, period = _query(request)
        tenant = _tenant(request, data.get("tenant")) if data.get("tenant") else None
        cluster = get_object_or_404(Cluster, name=data["cluster"]) if data.get("cluster") else None
        if is_operator_view(request.user) and cluster is None and tenant is None:
            counts = flows.fleet_transition_counts(period)  # the daily roll-up
        else:
            counts = flows.transition_counts(
                flows.state_changes(
                    visible_events(request.user),
                    period,
                    cluster_id=cluster.pk if cluster else None,
                    tenant_id=tenant.pk if tenant else None,
                )
            )
        return Response(
            serializers.FlowReportSerializer(
                {
                    "since": period.since,
                    "until": period.until,
                    "total": sum(f["count"] for f in counts),
                    "flows": counts,
                }
            ).data
        )
