"""REST endpoints of the fabric, for staff only (anyone else: 404): plan import, upload of
tool output collected elsewhere, runs, discrepancies, the last run's links, tickets (close)
and manual validations. Writes need ``nodes.operate_node`` and go through ``fabric.plan``,
``fabric.discovery`` and ``fabric.services``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodes.api.serializers import DetailSerializer
from nodes.permissions import StaffOnly
from nodes.services import Actor
from nodewarden.api import JSONParser, error_body, read_bounded

from .. import services
from ..choices import RunSource
from ..filters import DiscoveredLinkFilterSet, DiscrepancyFilterSet, RunFilterSet, TicketFilterSet, ValidationFilterSet
from ..models import CablingPlan, DiscoveredLink, DiscoveryOutput, DiscoveryRun, Discrepancy, ManualValidation, Ticket
from ..plan import PlanImportError, import_plan
from . import serializers

FORBIDDEN = OpenApiResponse(DetailSerializer, description="The user may not operate nodes.")


class CSVTextParser(BaseParser):
    """A plan posted as the CSV file itself (Content-Type: text/csv)."""

    media_type = "text/csv"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> dict[str, str]:
        raw = read_bounded(stream)
        try:
            return {"csv": raw.decode("utf-8-sig")}
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"The CSV is not UTF-8 text ({exc.reason} at byte {exc.start}).") from exc


class FabricViewSet(viewsets.GenericViewSet[Any]):
    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    permission_denied_message = "Changing the fabric's records needs the permission to operate nodes."


@extend_schema_view(list=extend_schema(summary="List cabling plan versions, newest (in force) first"))
class PlanViewSet(mixins.ListModelMixin, FabricViewSet):
    """Cabling plan versions; POST a new one (CSV) to put it in force."""

    queryset = CablingPlan.objects.order_by("-created", "-id")
    serializer_class = serializers.CablingPlanSerializer
    parser_classes = [JSONParser, CSVTextParser]

    @extend_schema(
        summary="Import a cabling plan (CSV): it becomes the plan in force",
        request={"application/json": serializers.PlanUploadSerializer, "text/csv": OpenApiTypes.STR},
        responses={
            201: serializers.CablingPlanSerializer,
            400: OpenApiResponse(serializers.PlanErrorsSerializer, description="Every bad line; nothing imported."),
            403: FORBIDDEN,
        },
    )
    def create(self, request: Request) -> Response:
        body = serializers.PlanUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        source = "API (text/csv)" if request.content_type.startswith("text/csv") else "API"
        try:
            plan = import_plan(
                body.validated_data["csv"],
                actor=Actor(user=request.user),
                source=source,
                note=body.validated_data["note"],
            )
        except PlanImportError as exc:
            errors = [{"line": line, "message": message} for line, message in exc.errors]
            detail = f"The plan is refused, nothing imported: {len(errors)} bad line(s), listed in errors."
            return Response(error_body(detail, "invalid", errors=errors), status=status.HTTP_400_BAD_REQUEST)
        return Response(serializers.CablingPlanSerializer(plan).data, status=status.HTTP_201_CREATED)


# outputs: each run's tool names (the texts themselves stay out of the list).
RUNS = DiscoveryRun.objects.prefetch_related(
    Prefetch("outputs", queryset=DiscoveryOutput.objects.only("id", "run_id", "tool"))
)


@extend_schema_view(
    list=extend_schema(summary="List discovery runs, newest first"),
    retrieve=extend_schema(summary="One discovery run with its summary"),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FabricViewSet):
    """Discovery runs: scheduled collection, uploads, and the agents' counters."""

    queryset = RUNS.order_by("-started", "-id")
    serializer_class = serializers.DiscoveryRunSerializer
    filterset_class = RunFilterSet
    ordering_fields = ["started"]


class DiscoveryUploadView(APIView):
    """Tool output collected on a host of the fabric: parsed, compared with the plan, recorded as a run."""

    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    permission_denied_message = "Changing the fabric's records needs the permission to operate nodes."

    @extend_schema(
        summary="Upload infiniband-diags output as a discovery run",
        request=serializers.DiscoveryUploadSerializer,
        responses={
            201: serializers.DiscoveryRunSerializer,
            400: OpenApiResponse(
                serializers.DiscoveryErrorsSerializer, description="A tool's output could not be read (tool and line)."
            ),
            403: FORBIDDEN,
        },
    )
    def post(self, request: Request) -> Response:
        from ..discovery import DiscoveryParseError, parse_upload

        body = serializers.DiscoveryUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            upload = parse_upload(body.validated_data)
        except DiscoveryParseError as exc:
            detail = f"The upload is refused: {len(exc.errors)} output(s) could not be read, listed in errors."
            return Response(error_body(detail, "invalid", errors=exc.errors), status=status.HTTP_400_BAD_REQUEST)
        run = services.record_run(
            upload.seen,
            upload.counters,
            source=RunSource.UPLOAD,
            actor=Actor(user=request.user),
            outputs=upload.outputs,
            guids=upload.guids,
        )
        return Response(serializers.DiscoveryRunSerializer(RUNS.get(pk=run.pk)).data, status=status.HTTP_201_CREATED)


@extend_schema_view(list=extend_schema(summary="List discrepancies (the last run's unless run or ticket is given)"))
class DiscrepancyViewSet(mixins.ListModelMixin, FabricViewSet):
    """What runs found, filtered like the discrepancies page."""

    queryset = Discrepancy.objects.order_by("kind", "a_endpoint", "id")
    serializer_class = serializers.DiscrepancySerializer
    filterset_class = DiscrepancyFilterSet


@extend_schema_view(list=extend_schema(summary="List the last run's links and down ports"))
class LinkViewSet(mixins.ListModelMixin, FabricViewSet):
    """The cables the last discovery run saw, and its ports found down with no peer."""

    queryset = DiscoveredLink.objects.none()  # for the schema; the rows come from get_queryset
    serializer_class = serializers.DiscoveredLinkSerializer
    filterset_class = DiscoveredLinkFilterSet

    def get_queryset(self) -> QuerySet[DiscoveredLink]:
        run = services.last_run()
        if run is None:
            return DiscoveredLink.objects.none()
        # a_device, b_device: both names on every row.
        return (
            DiscoveredLink.objects.filter(run=run)
            .select_related("a_device", "b_device")
            .order_by("a_device__name", "a_port", "id")
        )


@extend_schema_view(
    list=extend_schema(summary="List fabric tickets, newest first"), retrieve=extend_schema(summary="One fabric ticket")
)
class TicketViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, FabricViewSet):
    """Technician tickets: one per problem and cable, closed when a run finds it fixed (or by hand)."""

    # nodes: every ticket's node ids and hostnames, one query per page.
    queryset = Ticket.objects.prefetch_related("nodes").order_by("-opened_at", "-id")
    serializer_class = serializers.TicketSerializer
    filterset_class = TicketFilterSet
    ordering_fields = ["opened_at", "closed_at", "times_seen"]

    @extend_schema(
        summary="Close a ticket by hand (the next run reopens it if the problem persists)",
        request=serializers.CloseTicketSerializer,
        responses={
            200: serializers.TicketSerializer,
            400: OpenApiResponse(DetailSerializer),
            403: FORBIDDEN,
            404: OpenApiResponse(DetailSerializer),
        },
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def close(self, request: Request, pk: str | None = None) -> Response:
        ticket = self.get_object()
        body = serializers.CloseTicketSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.close_ticket(ticket.pk, actor=Actor(user=request.user), reason=body.validated_data["reason"])
        return Response(serializers.TicketSerializer(self.get_queryset().get(pk=ticket.pk)).data)


@extend_schema_view(list=extend_schema(summary="List manual fabric validations, newest first"))
class ValidationViewSet(mixins.ListModelMixin, FabricViewSet):
    """The fabric team's hands-on checks: who, when, what, result."""

    queryset = ManualValidation.objects.order_by("-created", "-id")
    serializer_class = serializers.ManualValidationSerializer
    filterset_class = ValidationFilterSet

    @extend_schema(
        summary="Record a manual fabric validation",
        request=serializers.RecordValidationSerializer,
        responses={201: serializers.ManualValidationSerializer, 403: FORBIDDEN},
    )
    def create(self, request: Request) -> Response:
        body = serializers.RecordValidationSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        record = services.record_manual_validation(actor=Actor(user=request.user), **body.validated_data)
        return Response(serializers.ManualValidationSerializer(record).data, status=status.HTTP_201_CREATED)
