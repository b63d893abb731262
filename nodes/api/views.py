"""REST endpoints for nodes: list and detail, history, lifecycle transitions, and fencing one GPU.

Every queryset starts from ``nodes.scoping``, so another tenant's node answers
404; every change of state goes through ``nodes.services``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from nodes import services
from nodes.filters import NodeFilterSet
from nodes.history import KIND_CHOICES, RANGES, RUN_KIND, HistoryFilterForm, filter_events
from nodes.models import GPU, Node, NodeEvent
from nodes.permissions import CanOperateObject
from nodes.scoping import visible_events, visible_nodes
from nodewarden.filters import FilterBackend

from . import serializers

_Row = TypeVar("_Row")  # what the queryset yields: nodes, or values() rows
T = TypeVar("T", bound=Callable[..., Any])  # a view method the schema decorates

# Joined into every node row: each is named in the serializer.
NODE_RELATIONS = ("site", "cluster", "rack", "tenant", "hardware_profile", "persona")
REQUEST_ID_HEADER = "X-Request-ID"
CORRELATION_ID_MAX = 100  # NodeEvent.correlation_id's max_length


# The node page's history filter, documented for the API (runs are not in the API's history).
HISTORY_PARAMETERS = [
    OpenApiParameter(
        "kind", OpenApiTypes.STR, enum=[k for k, _ in KIND_CHOICES if k and k != RUN_KIND], description="Event kind."
    ),
    OpenApiParameter("range", OpenApiTypes.STR, enum=list(RANGES), description="Only the last 24h, 7d, 30d, or all."),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="Only events at or after this time."),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Only events at or before this time."),
]
GPU_INDEX_MAX = 32767  # GPU.index is a small integer: a larger one names no GPU (404, not a database error)


def _gpu_action_schema(verb: str, summary: str, description: str) -> Callable[[T], T]:
    """The OpenAPI description shared by the two GPU verbs."""
    return extend_schema(
        operation_id=f"nodes_gpus_{verb}",
        summary=summary,
        description=f"{description} The node's own state is unchanged; the reason is kept in its history.",
        parameters=[
            OpenApiParameter("index", OpenApiTypes.INT, OpenApiParameter.PATH, description="The GPU's index."),
            OpenApiParameter(REQUEST_ID_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False),
        ],
        request=serializers.TransitionReasonSerializer,
        examples=[OpenApiExample("Reason", value={"reason": "XID 79 on GPU 3"}, request_only=True)],
        responses={
            201: serializers.GpuActionResultSerializer,
            400: OpenApiResponse(serializers.ReasonErrorSerializer, description="The reason is missing or blank."),
            403: OpenApiResponse(serializers.DetailSerializer, description="The user may not operate nodes."),
            404: OpenApiResponse(serializers.DetailSerializer, description="No such node visible, or no such GPU."),
            409: OpenApiResponse(serializers.DetailSerializer, description=f"The GPU's health does not allow {verb}."),
        },
    )


@extend_schema_view(
    list=extend_schema(
        summary="List nodes",
        description="Same filters as the node list page: search by hostname, serial, GPU UUID or "
        "BMC address, filter by state, place and owner, sort with ``ordering``.",
    ),
    retrieve=extend_schema(summary="One node with its GPUs"),
)
class NodeViewSet(viewsets.ReadOnlyModelViewSet[Node]):
    """GPU servers with their place, owner, state and GPUs."""

    serializer_class = serializers.NodeSerializer
    filterset_class = NodeFilterSet
    # Sorting is NodeFilterSet's own ``ordering`` (as on the page); DRF's OrderingFilter would fight it.
    filter_backends = [FilterBackend]
    permission_classes = [permissions.IsAuthenticated, CanOperateObject]
    permission_denied_message = "You may not run lifecycle transitions on nodes."

    def get_queryset(self) -> QuerySet[Node]:
        nodes = visible_nodes(self.request.user)
        if self.action in ("list", "retrieve"):
            # One join for the related names and one query for all GPUs of the page, not one per node.
            nodes = nodes.select_related(*NODE_RELATIONS).prefetch_related("gpus")
        return nodes

    def filter_queryset(self, queryset: QuerySet[Node, _Row]) -> QuerySet[Node, _Row]:
        queryset = super().filter_queryset(queryset)
        order = queryset.query.order_by
        # Sorting by state or site alone leaves ties; hostname keeps offset pages stable.
        return queryset.order_by(*order, "hostname") if order else queryset

    @extend_schema(
        summary="A node's history, newest first",
        description="Filter by ``kind`` and by time (``range``, or ``since``/``until`` in ISO 8601), as the "
        "node page's history does; an invalid filter answers 400.",
        parameters=HISTORY_PARAMETERS,
        responses=serializers.NodeEventSerializer(many=True),
    )
    @action(detail=True, filter_backends=[])
    def history(self, request: Request, pk: str | None = None) -> Response:
        node = self.get_object()
        form = HistoryFilterForm(request.query_params)
        if not form.is_valid():
            raise exceptions.ValidationError(form.errors.get_json_data())
        # No joins needed: each row carries copies of the actor's name and the hostname.
        events = filter_events(visible_events(request.user).filter(node=node), form.window()).order_by(
            "-created", "-id"
        )
        # DRF paginates any queryset; its stubs tie paginate_queryset to the viewset's model (Node).
        page: list[NodeEvent] | None = self.paginate_queryset(events)  # type: ignore[arg-type]
        return self.get_paginated_response(serializers.NodeEventSerializer(page, many=True).data)

    @extend_schema(
        summary="Transitions the requesting user may run on this node now",
        responses=serializers.AvailableTransitionSerializer(many=True),
    )
    @action(detail=True, filter_backends=[], pagination_class=None)
    def transitions(self, request: Request, pk: str | None = None) -> Response:
        node = self.get_object()
        available = services.available_transitions(node, request.user)
        return Response(serializers.AvailableTransitionSerializer(available, many=True).data)

    @extend_schema(
        operation_id="nodes_transitions_run",
        summary="Run a lifecycle transition",
        description="Moves the node to the transition's target state and records the reason in its history. "
        f"The optional {REQUEST_ID_HEADER} header is kept as the event's correlation id.",
        parameters=[
            OpenApiParameter(
                "name",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                enum=sorted(services.VERBS),
                description="Transition to run; see GET /api/nodes/{id}/transitions/.",
            ),
            OpenApiParameter(REQUEST_ID_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False),
        ],
        request=serializers.TransitionReasonSerializer,
        examples=[OpenApiExample("Drain", value={"reason": "XID 79 on GPU 3"}, request_only=True)],
        responses={
            201: serializers.TransitionResultSerializer,
            400: OpenApiResponse(serializers.ReasonErrorSerializer, description="The reason is missing or blank."),
            403: OpenApiResponse(serializers.DetailSerializer, description="The user may not run transitions."),
            404: OpenApiResponse(serializers.DetailSerializer, description="No such node visible to the user."),
            409: OpenApiResponse(
                serializers.DetailSerializer,
                description="Unknown transition, not allowed in the node's state, or the node changed concurrently.",
            ),
        },
    )
    @action(detail=True, methods=["post"], url_path=r"transitions/(?P<name>[^/.]+)", filter_backends=[])
    def transition(self, request: Request, name: str, pk: str | None = None) -> Response:
        node = self.get_object()
        body = serializers.TransitionReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        event = _run_transition(node, name, request, body.validated_data["reason"])
        result = {"node": Node.objects.get(pk=node.pk), "event": event}
        return Response(serializers.TransitionResultSerializer(result).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="nodes_maintenance_start",
        summary="Start maintenance",
        description="An operator's planned work: the node drains once its current job ends, then waits in "
        "maintenance (not triage), out of its workload scheduler, until maintenance is ended.",
        parameters=[OpenApiParameter(REQUEST_ID_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False)],
        request=serializers.TransitionReasonSerializer,
        examples=[OpenApiExample("Reason", value={"reason": "Swap the PSU (ticket DC-311)"}, request_only=True)],
        responses={
            201: serializers.TransitionResultSerializer,
            400: OpenApiResponse(serializers.ReasonErrorSerializer, description="The reason is missing or blank."),
            403: OpenApiResponse(serializers.DetailSerializer, description="The user may not operate nodes."),
            404: OpenApiResponse(serializers.DetailSerializer, description="No such node visible to the user."),
            409: OpenApiResponse(serializers.DetailSerializer, description="The node is not in production."),
        },
    )
    @action(detail=True, methods=["post"], url_path="maintenance/start", filter_backends=[])
    def start_maintenance(self, request: Request, pk: str | None = None) -> Response:
        node = self.get_object()
        body = serializers.TransitionReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        event = _run_transition(node, "start_maintenance", request, body.validated_data["reason"])
        result = {"node": Node.objects.get(pk=node.pk), "event": event}
        return Response(serializers.TransitionResultSerializer(result).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="nodes_maintenance_end",
        summary="End maintenance",
        description="The operator's work is done: ``work`` says what was done and picks the re-validation "
        "plan the node walks back to production (a failed stage sends it to triage).",
        parameters=[OpenApiParameter(REQUEST_ID_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False)],
        request=serializers.EndMaintenanceSerializer,
        examples=[
            OpenApiExample("Nothing touched", value={"work": "none", "reason": "Rack power work"}, request_only=True)
        ],
        responses={
            201: serializers.TransitionResultSerializer,
            400: OpenApiResponse(serializers.DetailSerializer, description="The work or the reason is missing."),
            403: OpenApiResponse(serializers.DetailSerializer, description="The user may not operate nodes."),
            404: OpenApiResponse(serializers.DetailSerializer, description="No such node visible to the user."),
            409: OpenApiResponse(serializers.DetailSerializer, description="The node is not in maintenance."),
        },
    )
    @action(detail=True, methods=["post"], url_path="maintenance/end", filter_backends=[])
    def end_maintenance(self, request: Request, pk: str | None = None) -> Response:
        node = self.get_object()
        body = serializers.EndMaintenanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        correlation_id = request.headers.get(REQUEST_ID_HEADER, "")[:CORRELATION_ID_MAX]
        try:
            event = services.end_maintenance(
                node.pk,
                actor=services.Actor(user=request.user),
                reason=body.validated_data["reason"],
                work=body.validated_data["work"],
                correlation_id=correlation_id,
            )
        except ObjectDoesNotExist as exc:  # deleted between the lookup and the row lock
            raise exceptions.NotFound() from exc
        result = {"node": Node.objects.get(pk=node.pk), "event": event}
        return Response(serializers.TransitionResultSerializer(result).data, status=status.HTTP_201_CREATED)

    @_gpu_action_schema(
        "fence", "Fence one GPU", "The scheduler stops handing the GPU out (or, where it cannot, the node is drained)."
    )
    @action(detail=True, methods=["post"], url_path=r"gpus/(?P<index>[0-9]+)/fence", filter_backends=[])
    def fence_gpu(self, request: Request, index: str, pk: str | None = None) -> Response:
        return self._gpu_action(request, index, services.fence_gpu)

    @_gpu_action_schema("clear", "Clear one GPU", "The GPU is trusted again and given back to the scheduler.")
    @action(detail=True, methods=["post"], url_path=r"gpus/(?P<index>[0-9]+)/clear", filter_backends=[])
    def clear_gpu(self, request: Request, index: str, pk: str | None = None) -> Response:
        return self._gpu_action(request, index, services.clear_gpu)

    def _gpu_action(self, request: Request, index: str, verb: Any) -> Response:
        node = self.get_object()
        body = serializers.TransitionReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if int(index) > GPU_INDEX_MAX:
            raise exceptions.NotFound(f"No GPU {index} on this node.")
        correlation_id = request.headers.get(REQUEST_ID_HEADER, "")[:CORRELATION_ID_MAX]
        try:
            event = verb(
                node.pk,
                int(index),
                actor=services.Actor(user=request.user),
                reason=body.validated_data["reason"],
                correlation_id=correlation_id,
            )
        except GPU.DoesNotExist as exc:
            raise exceptions.NotFound(f"No GPU {index} on this node.") from exc
        gpus = list(GPU.objects.filter(node=node))
        result = {
            "gpu": next(g for g in gpus if g.index == int(index)),
            "usable_gpu_count": services.usable_gpu_count(gpus),
            "event": event,
        }
        return Response(serializers.GpuActionResultSerializer(result).data, status=status.HTTP_201_CREATED)


def _run_transition(node: Node, name: str, request: Request, reason: str) -> NodeEvent:
    """Call the service; its refusals propagate to the project's exception handler
    (nodewarden.api), which answers 409, 403 or 400 for every endpoint alike."""
    correlation_id = request.headers.get(REQUEST_ID_HEADER, "")[:CORRELATION_ID_MAX]
    try:
        return services.perform(
            node.pk, name, actor=services.Actor(user=request.user), reason=reason, correlation_id=correlation_id
        )
    except ObjectDoesNotExist as exc:  # deleted between the lookup and the row lock
        raise exceptions.NotFound() from exc
