"""REST endpoints for active checks.

Operators request and read checks under /api/nodes/{id}/checks/ and /api/checks/{id}/
(scoped by ``nodes.scoping``: another tenant's node or run answers 404). The node agent
polls /api/agent/checks/ and reports to /api/agent/checks/{id}/result/, authenticated by
its bearer token. Every change goes through ``checks.services``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checks import services
from nodes.api.serializers import DetailSerializer
from nodes.models import OPERATE, Run
from nodes.permissions import IsNodeAgent
from nodes.scoping import visible_node_or_404, visible_nodes
from nodes.services import Actor
from telemetry.auth import AgentIdentity, AgentTokenAuthentication

from . import serializers


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The check's state does not allow this."


@contextmanager
def refusals_as_http() -> Iterator[None]:
    """The service's refusals as HTTP answers; ReasonRequired and ValidationError become
    400 in the project's exception handler."""
    try:
        yield
    except services.CheckConflict as exc:
        raise Conflict(str(exc)) from exc
    except services.CheckForbidden as exc:
        raise exceptions.PermissionDenied(str(exc)) from exc
    except ObjectDoesNotExist as exc:  # gone between the lookup and the lock, or another node's run
        raise exceptions.NotFound() from exc


def visible_runs(user: object) -> QuerySet[Run]:
    # requested_by is named in every row; output (up to 64 KiB) only in the detail.
    return Run.objects.filter(node__in=visible_nodes(user)).select_related("requested_by")


ERRORS = {
    403: OpenApiResponse(DetailSerializer, description="The user may not request or cancel checks."),
    404: OpenApiResponse(DetailSerializer, description="No such node or run visible to the user."),
    409: OpenApiResponse(DetailSerializer, description="Not in this state of the node or the run."),
}


class NodeChecksView(generics.GenericAPIView[Run]):
    """A node's recorded runs (active checks and transition follow-ups), and requests for new checks."""

    serializer_class = serializers.CheckRunSerializer

    def get_queryset(self) -> QuerySet[Run]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model, with no request
            return Run.objects.none()
        node = visible_node_or_404(self.request.user, self.kwargs["pk"])
        return visible_runs(self.request.user).filter(node=node).defer("output").order_by("-created", "-id")

    @extend_schema(summary="A node's runs, newest first", responses=serializers.CheckRunSerializer(many=True))
    def get(self, request: Request, pk: int) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(
        summary="Request an active check",
        request=serializers.CheckRequestSerializer,
        responses={
            201: serializers.CheckRunSerializer,
            400: OpenApiResponse(description="Unknown kind, bad params (each named), or no reason."),
            **ERRORS,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        if not request.user.has_perm(OPERATE):
            raise exceptions.PermissionDenied("You may not request checks on nodes.")
        body = serializers.CheckRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with refusals_as_http():
            run = services.request_check(
                node.pk,
                body.validated_data["kind"],
                params=body.validated_data["params"],
                actor=Actor(user=request.user),
                reason=body.validated_data["reason"],
            )
        return Response(self.get_serializer(run).data, status=status.HTTP_201_CREATED)


class CheckRunView(generics.RetrieveAPIView[Run]):
    """One recorded run, with the tool's output."""

    serializer_class = serializers.CheckRunDetailSerializer

    def get_queryset(self) -> QuerySet[Run]:
        return visible_runs(self.request.user)

    @extend_schema(summary="One run with its output")
    def get(self, request: Request, *args: object, **kwargs: object) -> Response:
        return super().get(request, *args, **kwargs)


class CancelCheckView(generics.GenericAPIView[Run]):
    """Withdraw a queued check."""

    serializer_class = serializers.CancelSerializer

    def get_queryset(self) -> QuerySet[Run]:
        return visible_runs(self.request.user)

    @extend_schema(
        summary="Cancel a queued check",
        request=serializers.CancelSerializer,
        responses={200: serializers.CheckRunSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        with refusals_as_http():
            run = services.cancel_check(run.pk, actor=Actor(user=request.user), reason=body.validated_data["reason"])
        return Response(serializers.CheckRunSerializer(run).data)


class GiveBackNodeView(APIView):
    """The node's customer or an operator wants the node back now: its running checks are preempted."""

    @extend_schema(
        summary="Take the node back from its running active checks",
        request=serializers.GiveBackSerializer,
        responses={200: serializers.GiveBackAnswerSerializer, **ERRORS},
    )
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        body = serializers.GiveBackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with refusals_as_http():
            runs = services.give_back_node(
                node.pk, actor=Actor(user=request.user), reason=body.validated_data["reason"]
            )
        return Response(serializers.GiveBackAnswerSerializer({"preempted": runs}).data)


def _agent_node_id(request: Request) -> int:
    """The node of the agent that called (IsNodeAgent lets agents in only)."""
    agent = request.user
    if not isinstance(agent, AgentIdentity):
        raise exceptions.NotAuthenticated()
    return agent.node_id


class AgentChecksView(APIView):
    """The node agent's poll for work: queued checks become its own while the node is idle."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        summary="Agent: take the node's queued checks (only while idle)", responses=serializers.AgentClaimSerializer
    )
    def get(self, request: Request) -> Response:
        with refusals_as_http():
            claim = services.claim_checks_for_agent(_agent_node_id(request))
        data = {"idle": claim.idle, "reason": claim.reason, "checks": claim.runs}
        return Response(serializers.AgentClaimSerializer(data).data)


class AgentRunStateView(APIView):
    """The node agent asks, every few seconds while a check runs, whether the run is still wanted."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        summary="Agent: is this running check still wanted?",
        operation_id="agent_checks_state",
        responses={
            200: serializers.AgentRunStateSerializer,
            404: OpenApiResponse(DetailSerializer, description="Not a run of this node."),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        with refusals_as_http():
            run, wanted, reason = services.run_is_wanted(pk, _agent_node_id(request))
        data = {"id": run.pk, "status": run.status, "wanted": wanted, "reason": reason}
        return Response(serializers.AgentRunStateSerializer(data).data)


class AgentCheckResultView(APIView):
    """The node agent reports the outcome of a check it took."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        summary="Agent: report a check's outcome",
        request=serializers.CheckResultSerializer,
        responses={
            200: serializers.CheckResultAnswerSerializer,
            400: OpenApiResponse(description="Bad body; each bad field is named."),
            404: OpenApiResponse(DetailSerializer, description="Not a run of this node."),
            409: OpenApiResponse(DetailSerializer, description="A different result is already recorded."),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        body = serializers.CheckResultSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = services.CheckResult(**body.validated_data)
        with refusals_as_http():
            run, _ = services.record_check_result(pk, _agent_node_id(request), result=result)
        return Response({"id": run.pk, "status": run.status})
