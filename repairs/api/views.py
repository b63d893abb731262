"""REST endpoints of repairs: tickets and RMA cases (read-only, scoped like nodes), their verbs
as POSTs with a reason, opening one on a node, and CSV exports for external ticketing.

Refusals come from ``repairs.services`` and reach the client through the project's exception
handler: RepairForbidden 403, ReasonRequired/ValidationError 400, RepairConflict 409; another
tenant's ticket, case or node answers 404 (looked up before any permission check).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodes.api.serializers import DetailSerializer
from nodes.scoping import visible_node_or_404
from nodes.services import Actor

from .. import services
from ..choices import RmaState, TicketState
from ..filters import RepairTicketFilterSet, RmaCaseFilterSet
from ..models import RepairEvent, RepairTicket, RmaCase
from ..scoping import visible_cases, visible_tickets
from . import serializers

ERRORS = {
    400: OpenApiResponse(DetailSerializer, description="No reason, or a missing or invalid field."),
    403: OpenApiResponse(DetailSerializer, description="The user may not operate nodes."),
    404: OpenApiResponse(DetailSerializer, description="No such record visible to the user."),
    409: OpenApiResponse(DetailSerializer, description="Its state (or the node's) does not allow this."),
}


def _with_events(queryset: QuerySet[Any]) -> QuerySet[Any]:
    # events: one query for the whole page, oldest first (a ticket has a handful).
    return queryset.prefetch_related(Prefetch("events", queryset=RepairEvent.objects.order_by("created", "id")))


if TYPE_CHECKING:
    _VerbBase = generics.GenericAPIView[Any]  # the views it is mixed into
else:
    _VerbBase = object


class _VerbMixin(_VerbBase):
    """POST a verb on the looked-up record: validate the body, call the service, answer with the record."""

    def _act(self, request: Request, body_class: type, verb: Callable[..., Any]) -> Response:
        record = self.get_object()
        body = body_class(data=request.data)
        body.is_valid(raise_exception=True)
        verb(record.pk, actor=Actor(user=request.user), **body.validated_data)
        fresh = self.get_queryset().get(pk=record.pk)
        return Response(self.get_serializer(fresh).data, status=status.HTTP_200_OK)


@extend_schema_view(
    list=extend_schema(summary="List repair tickets, newest first"),
    retrieve=extend_schema(summary="One repair ticket with its history"),
)
class RepairTicketViewSet(_VerbMixin, viewsets.ReadOnlyModelViewSet[RepairTicket]):
    """Technicians' tickets: start, resolve (the node re-validates) and cancel, each with a reason."""

    serializer_class = serializers.RepairTicketSerializer
    filterset_class = RepairTicketFilterSet
    ordering_fields = ["created", "updated"]
    queryset = RepairTicket.objects.none()  # for the schema; rows come from get_queryset

    def get_queryset(self) -> QuerySet[RepairTicket]:
        return _with_events(visible_tickets(self.request.user).order_by("-created", "-id"))

    @extend_schema(
        summary="Start work on a ticket",
        request=serializers.RepairStartSerializer,
        responses={200: serializers.RepairTicketSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def start(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RepairStartSerializer, services.start_repair)

    @extend_schema(
        summary="Resolve a ticket (the node re-validates once its last ticket is resolved)",
        request=serializers.RepairReasonSerializer,
        responses={200: serializers.RepairTicketSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RepairReasonSerializer, services.resolve_repair)

    @extend_schema(
        summary="Cancel a ticket (the node stays where it is)",
        request=serializers.RepairReasonSerializer,
        responses={200: serializers.RepairTicketSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RepairReasonSerializer, services.cancel_repair)


@extend_schema_view(
    list=extend_schema(summary="List RMA cases, newest first"),
    retrieve=extend_schema(summary="One RMA case with its history"),
)
class RmaCaseViewSet(_VerbMixin, viewsets.ReadOnlyModelViewSet[RmaCase]):
    """Returns to vendors: ship, receive (outcome, replacement serial), close (the node re-validates), cancel."""

    serializer_class = serializers.RmaCaseSerializer
    filterset_class = RmaCaseFilterSet
    ordering_fields = ["created", "updated"]
    queryset = RmaCase.objects.none()  # for the schema; rows come from get_queryset

    def get_queryset(self) -> QuerySet[RmaCase]:
        return _with_events(visible_cases(self.request.user).order_by("-created", "-id"))

    @extend_schema(
        summary="Mark the failed part shipped to the vendor",
        request=serializers.RmaShipSerializer,
        responses={200: serializers.RmaCaseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def ship(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RmaShipSerializer, services.ship_rma)

    @extend_schema(
        summary="Record the vendor's answer and the part that came back",
        request=serializers.RmaReceiveSerializer,
        responses={200: serializers.RmaCaseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def receive(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RmaReceiveSerializer, services.receive_rma)

    @extend_schema(
        summary="Close a returned case (the node re-validates when nothing else holds it)",
        request=serializers.RepairReasonSerializer,
        responses={200: serializers.RmaCaseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def close(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RepairReasonSerializer, services.close_rma)

    @extend_schema(
        summary="Cancel a case (the node stays where it is)",
        request=serializers.RepairReasonSerializer,
        responses={200: serializers.RmaCaseSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.RepairReasonSerializer, services.cancel_rma)


class _NodeRecordsView(generics.ListCreateAPIView[Any]):
    """A node's tickets or cases (GET), or a new one (POST); another tenant's node answers 404."""

    filter_backends: list[type] = []
    open_serializer: type = serializers.RepairReasonSerializer

    def _node_pk(self) -> int:
        return visible_node_or_404(self.request.user, self.kwargs["pk"]).pk

    def _open(self, node_id: int, actor: Actor, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        node_id = self._node_pk()
        body = self.open_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        record = self._open(node_id, Actor(user=request.user), body.validated_data)
        fresh = self.get_queryset().get(pk=record.pk)
        return Response(self.get_serializer(fresh).data, status=status.HTTP_201_CREATED)


class NodeRepairTicketsView(_NodeRecordsView):
    serializer_class = serializers.RepairTicketSerializer
    open_serializer = serializers.RepairTicketOpenSerializer
    queryset = RepairTicket.objects.none()

    def get_queryset(self) -> QuerySet[RepairTicket]:
        return _with_events(RepairTicket.objects.filter(node_id=self._node_pk()).order_by("-created", "-id"))

    def _open(self, node_id: int, actor: Actor, data: dict[str, Any]) -> RepairTicket:
        reason = data.pop("reason")
        return services.open_repair_ticket(node_id, actor=actor, reason=reason, **data)

    @extend_schema(summary="A node's repair tickets, newest first")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        summary="Open a repair ticket on a node",
        request=serializers.RepairTicketOpenSerializer,
        responses={201: serializers.RepairTicketSerializer, **ERRORS},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)


class NodeRmaCasesView(_NodeRecordsView):
    serializer_class = serializers.RmaCaseSerializer
    open_serializer = serializers.RmaCaseOpenSerializer
    queryset = RmaCase.objects.none()

    def get_queryset(self) -> QuerySet[RmaCase]:
        return _with_events(RmaCase.objects.filter(node_id=self._node_pk()).order_by("-created", "-id"))

    def _open(self, node_id: int, actor: Actor, data: dict[str, Any]) -> RmaCase:
        reason = data.pop("reason")
        return services.open_rma_case(node_id, actor=actor, reason=reason, **data)

    @extend_schema(summary="A node's RMA cases, newest first")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        summary="Open an RMA case on a node",
        request=serializers.RmaCaseOpenSerializer,
        responses={201: serializers.RmaCaseSerializer, **ERRORS},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)


# --- CSV exports ----------------------------------------------------------------------
class CSVRenderer(BaseRenderer):
    """text/csv; the exports stream their rows themselves, this only renders errors."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return f"error\n{data}\n".encode()


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> Any:
    # A leading =, +, - or @ would run as a formula in a spreadsheet (CSV injection).
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return "" if value is None else value


def _stream_csv(filename: str, header: list[str], rows: Iterable[list[Any]]) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_cell(v) for v in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _filtered(filterset_class: type, request: Request, queryset: QuerySet[Any]) -> QuerySet[Any]:
    filterset = filterset_class(request.query_params, queryset=queryset, request=request)
    if not filterset.is_valid():
        raise exceptions.ValidationError(filterset.errors)
    filtered: QuerySet[Any] = filterset.qs  # django-filter has no type information
    return filtered


def _iso(value: Any) -> str:
    return value.isoformat() if value else ""


TICKET_COLUMNS = [
    "id",
    "hostname",
    "site",
    "rack",
    "rack_unit",
    "component",
    "what",
    "state",
    "assignee",
    "opened_by",
    "created",
    "updated",
    "resolved_at",
    "finding_id",
    "remediation_id",
]
CASE_COLUMNS = [
    "id",
    "hostname",
    "vendor",
    "part",
    "failed_serial",
    "replacement_serial",
    "vendor_case_number",
    "state",
    "outcome",
    "opened_by",
    "created",
    "shipped_at",
    "returned_at",
    "closed_at",
]


def _state_param(choices: Any) -> OpenApiParameter:
    return OpenApiParameter(
        "state", OpenApiTypes.STR, enum=choices.values, many=True, description="Only these states (repeat for several)."
    )


SEARCH = OpenApiParameter("q", OpenApiTypes.STR, description="Free-text search.")


class RepairTicketExportView(APIView):
    """All visible tickets matching the filters, as CSV, for an external ticketing system."""

    renderer_classes = [CSVRenderer]

    @extend_schema(
        summary="Repair tickets as CSV",
        responses={(200, "text/csv"): OpenApiTypes.STR},
        parameters=[
            _state_param(TicketState),
            SEARCH,
            OpenApiParameter("site", OpenApiTypes.STR, description="Site slug."),
            OpenApiParameter("rack", OpenApiTypes.STR, description="Rack name."),
        ],
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        tickets = _filtered(RepairTicketFilterSet, request, visible_tickets(request.user).order_by("-created", "-id"))
        rows = (
            [
                t.pk,
                t.hostname,
                t.site,
                t.rack,
                t.rack_unit,
                t.component,
                t.what,
                t.state,
                t.assignee,
                t.opened_by_name,
                _iso(t.created),
                _iso(t.updated),
                _iso(t.resolved_at),
                t.finding_id,
                t.remediation_id,
            ]
            for t in tickets.iterator(chunk_size=500)
        )
        return _stream_csv("repair-tickets.csv", TICKET_COLUMNS, rows)


class RmaCaseExportView(APIView):
    """All visible RMA cases matching the filters, as CSV."""

    renderer_classes = [CSVRenderer]

    @extend_schema(
        summary="RMA cases as CSV",
        responses={(200, "text/csv"): OpenApiTypes.STR},
        parameters=[
            _state_param(RmaState),
            SEARCH,
            OpenApiParameter("vendor", OpenApiTypes.STR, description="Vendor (any case)."),
        ],
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        cases = _filtered(RmaCaseFilterSet, request, visible_cases(request.user).order_by("-created", "-id"))
        rows = (
            [
                c.pk,
                c.hostname,
                c.vendor,
                c.part,
                c.failed_serial,
                c.replacement_serial,
                c.vendor_case_number,
                c.state,
                c.outcome,
                c.opened_by_name,
                _iso(c.created),
                _iso(c.shipped_at),
                _iso(c.returned_at),
                _iso(c.closed_at),
            ]
            for c in cases.iterator(chunk_size=500)
        )
        return _stream_csv("rma-cases.csv", CASE_COLUMNS, rows)
