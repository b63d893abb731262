"""REST endpoints of Day 1: a node's stage runs, the operator's start and skip, and the
fleet summary. Scoped like every node read (another tenant's node answers 404)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checks.api.views import Conflict
from nodes.api.serializers import DetailSerializer
from nodes.choices import STAGE_KINDS
from nodes.models import Run
from nodes.scoping import visible_node_or_404, visible_nodes
from nodes.services import Actor

from .. import services, summary
from . import serializers

ERRORS = {
    400: OpenApiResponse(DetailSerializer, description="No reason given."),
    403: OpenApiResponse(DetailSerializer, description="The user may not operate nodes."),
    404: OpenApiResponse(DetailSerializer, description="No such node visible to the user."),
    409: OpenApiResponse(DetailSerializer, description="The node is not in a Day 1 stage, or the stage is open."),
}


class NodeStagesView(generics.ListAPIView[Run]):
    """A node's Day 1 stage runs, newest first."""

    serializer_class = serializers.StageRunSerializer
    queryset = Run.objects.none()  # for the schema; the real rows come from get_queryset

    def get_queryset(self) -> QuerySet[Run]:
        node = visible_node_or_404(self.request.user, self.kwargs["pk"])
        return (
            Run.objects.filter(node=node, kind__in=STAGE_KINDS)
            .select_related("requested_by")
            .defer("output")
            .order_by("-created", "-id")
        )

    @extend_schema(summary="A node's Day 1 stage runs, newest first")
    def get(self, request: Request, *args: object, **kwargs: object) -> Response:
        return super().get(request, *args, **kwargs)


class NodeStageActionView(generics.GenericAPIView[Any]):
    """Start (or retry) or skip the node's current Day 1 stage."""

    serializer_class = serializers.StageActionSerializer
    action_name = ""

    @extend_schema(request=serializers.StageActionSerializer, responses={201: serializers.StageRunSerializer, **ERRORS})
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        verb = services.start_stage if self.action_name == "start" else services.skip_stage
        try:
            run = verb(node.pk, actor=Actor(user=request.user), reason=body.validated_data["reason"])
        except services.StageConflict as exc:
            raise Conflict(str(exc)) from exc
        except services.StageForbidden as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(serializers.StageRunSerializer(run).data, status=status.HTTP_201_CREATED)


class StartStageView(NodeStageActionView):
    action_name = "start"

    @extend_schema(
        summary="Start or retry the node's current Day 1 stage",
        responses={201: serializers.StageRunSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        return super().post(request, pk)


class SkipStageView(NodeStageActionView):
    action_name = "skip"

    @extend_schema(
        summary="Skip the node's current Day 1 stage (audited)",
        responses={201: serializers.StageRunSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        return super().post(request, pk)


class Day1SummaryView(APIView):
    """The fleet's Day 1: nodes per stage, stage durations, commonest failures, yield."""

    @extend_schema(
        summary="Day 1 summary of the nodes visible to the caller", responses=serializers.Day1SummarySerializer
    )
    def get(self, request: Request) -> Response:
        nodes = visible_nodes(request.user)
        data = {
            "window_days": summary.WINDOW.days,
            "counts": summary.stage_counts(nodes),
            "durations": summary.stage_durations(nodes),
            "failures": summary.failure_reasons(nodes),
            "day1_yield": summary.day1_yield(nodes),
        }
        return Response(serializers.Day1SummarySerializer(data).data)


class NodePersonaView(generics.GenericAPIView[Any]):
    """Re-role a node to another persona (drain, reconfigure, re-validate, return)."""

    serializer_class = serializers.PersonaChangeRequestSerializer

    @extend_schema(
        summary="Re-role a node",
        request=serializers.PersonaChangeRequestSerializer,
        responses={201: serializers.PersonaChangeSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        from fleet.models import Persona

        from ..personas import request_persona_change

        node = visible_node_or_404(request.user, pk)
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        persona = Persona.objects.filter(name=body.validated_data["persona"]).first()
        if persona is None:
            raise exceptions.ValidationError({"persona": [f"No persona {body.validated_data['persona']!r}."]})
        try:
            change = request_persona_change(
                node.pk, persona.pk, actor=Actor(user=request.user), reason=body.validated_data["reason"]
            )
        except services.StageConflict as exc:
            raise Conflict(str(exc)) from exc
        except services.StageForbidden as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(serializers.PersonaChangeSerializer(change).data, status=status.HTTP_201_CREATED)
