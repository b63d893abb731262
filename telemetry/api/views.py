"""REST endpoints of the telemetry app: agent ingest, dcgm-exporter push, GPU health reads.

The agent endpoint is a plain Django view: it is the hottest path in the portal, and it
needs none of DRF's content negotiation, parsers or throttles (msgspec validates).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec
from django.db import DatabaseError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import APIException, NotAuthenticated, NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodes.api.serializers import DetailSerializer
from nodes.choices import NodeState
from nodes.models import OPERATE, Node
from nodes.permissions import IsNodeAgent, IsStaffOperator
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden.api import error_body
from nodewarden.bounds import timestamp_problem
from schedulers.conditions import last_transition
from schedulers.reactions import out_of_production_cause, scheduler_reason

from .. import commands, dcgm_exporter
from ..auth import AgentAuthError, AgentIdentity, AgentThrottled, AgentTokenAuthentication, identify_agent
from ..groupcommit import RETRY_AFTER_SECONDS, IngestBusy, ingest_request
from ..ingest import IngestRefused, IngestResult
from ..models import AgentCommand, GpuState, NodeHealth
from ..rejections import BodyTooLarge, read_body, reject
from ..schema import MAX_GPUS, AgentReport, decode_batch
from ..series import FIELDS, MAX_WINDOW, gpu_series
from . import serializers

log = logging.getLogger(__name__)


@csrf_exempt  # agents authenticate with a bearer token, never a cookie
def agent_reports(request: HttpRequest) -> HttpResponse:
    """POST /api/agent/reports/: a ReportBatch from a node agent."""
    if request.method != "POST":
        return JsonResponse(
            error_body("POST a ReportBatch.", "method_not_allowed", error="method not allowed"), status=405
        )
    vetted = vet_agent_reports(request)
    if isinstance(vetted, JsonResponse):
        return vetted
    try:
        outcome: IngestResult | Exception = ingest_request(vetted.node_id, vetted.reports, source="agent")
    except (IngestRefused, Node.DoesNotExist, IngestBusy, DatabaseError) as exc:
        outcome = exc
    return answer_agent_reports(request, vetted, outcome)  # after the commit


@dataclass(frozen=True)
class VettedReports:
    """An agent request that passed authentication, the body limit, decoding and the node check."""

    node_id: int
    hostname: str
    reports: list[AgentReport]
    body: bytes


def vet_agent_reports(request: HttpRequest) -> VettedReports | JsonResponse:
    """Everything before ingest: the token, the body, the decoding, the node; or the refusal.

    Shared by both roads to ingest (this view, grouped by telemetry.groupcommit, and the ASGI
    endpoint of telemetry.api.asgi), so that they answer alike."""
    try:
        agent = identify_agent(request.META.get("HTTP_AUTHORIZATION"), request)  # not .headers: built per request
    except AgentThrottled as exc:
        response = JsonResponse({"error": "too many failed attempts", "detail": str(exc)}, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
    except AgentAuthError as exc:
        response = JsonResponse(error_body(str(exc), "unauthorized", error="unauthorized"), status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    refuse = _refuser(request, "agent", agent.node_id, agent.hostname)
    try:
        body = read_body(request)
        reports = decode_batch(body)
    except BodyTooLarge as exc:
        return refuse(413, "body too large", str(exc), b"")
    except zlib.error as exc:
        return refuse(400, "invalid report", f"Content-Encoding gzip but the body does not inflate: {exc}", b"")
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return refuse(400, "invalid report", str(exc), body)
    foreign = sorted({r.hostname for r in reports if r.hostname.lower() != agent.hostname.lower()})
    if foreign:
        detail = f"This token belongs to {agent.hostname!r}; the batch has reports for {', '.join(map(repr, foreign))}."
        return refuse(403, "wrong node", detail, body)
    return VettedReports(agent.node_id, agent.hostname, reports, body)


def answer_agent_reports(
    request: HttpRequest, vetted: VettedReports, outcome: IngestResult | Exception
) -> HttpResponse:
    """The answer to a vetted request once its ingest is final: its result, or its own error.
    An exception of another kind than ingest's own is raised again (a 500)."""
    if isinstance(outcome, IngestResult):
        return HttpResponse(stored_body(outcome), content_type="application/json")
    if isinstance(outcome, IngestRefused):
        return _refuser(request, "agent", vetted.node_id, vetted.hostname)(
            400, "invalid report", str(outcome), vetted.body
        )
    if isinstance(outcome, Node.DoesNotExist):
        return JsonResponse(
            error_body("The token's node no longer exists.", "unauthorized", error="unauthorized"), status=401
        )
    if isinstance(outcome, IngestBusy):
        return _unavailable("The portal's ingest queue is full; resend after Retry-After.", outcome.retry_after)
    if isinstance(outcome, DatabaseError):
        # Nothing of this request was committed: the agent keeps the reports and resends them.
        log.error("ingest failed for node %s", vetted.node_id, exc_info=outcome)
        return _unavailable("The reports could not be stored; resend after Retry-After.", RETRY_AFTER_SECONDS)
    raise outcome


def stored_body(outcome: IngestResult) -> bytes:
    """The body of the answer to a request whose reports are stored: what JsonResponse would write."""
    return b'{"accepted": %d, "duplicates": %d}' % (outcome.accepted, outcome.duplicates)


def _unavailable(detail: str, retry_after: int) -> JsonResponse:
    response = JsonResponse(error_body(detail, "unavailable", error="unavailable"), status=503)
    response["Retry-After"] = str(retry_after)
    return response


def _refuser(
    request: HttpRequest, source: str, node_id: int | None, hostname: str
) -> Callable[[int, str, str, bytes], JsonResponse]:
    def refuse(status: int, error: str, detail: str, body: bytes) -> JsonResponse:
        return reject(
            request,
            status=status,
            source=source,
            error=error,
            detail=detail,
            body=body,
            node_id=node_id,
            hostname=hostname,
        )

    return refuse


class DcgmExporterPushView(APIView):
    """POST /api/ingest/dcgm-exporter/: dcgm-exporter's /metrics text, pushed by an operator's job."""

    permission_classes = [IsStaffOperator]
    permission_denied_message = "Pushing telemetry needs a staff account with the operate permission."

    @extend_schema(
        summary="Push dcgm-exporter metrics",
        description="Body: the Prometheus text exposition of one or more dcgm-exporters (Content-Type: "
        "text/plain). Hosts are matched to nodes by the Hostname/hostname label; hosts that "
        "match no node are listed in the answer and recorded as ingest rejections.",
        request={"text/plain": OpenApiTypes.STR},
        responses={200: serializers.DcgmPushResultSerializer},
    )
    def post(self, request: Request) -> Response | JsonResponse:
        raw = request._request  # the stream itself: DRF's parsers would buffer and cap it
        content_type = raw.content_type or ""
        if content_type not in ("text/plain", "application/openmetrics-text"):
            detail = f"Send the exposition as text/plain, not {content_type or 'no content type'!r}."
            return reject(raw, status=415, source="dcgm-exporter", error="unsupported media type", detail=detail)
        try:
            body = read_body(raw)
        except BodyTooLarge as exc:
            return reject(raw, status=413, source="dcgm-exporter", error="body too large", detail=str(exc))
        except zlib.error as exc:
            return reject(raw, status=400, source="dcgm-exporter", error="invalid exposition", detail=str(exc))
        try:
            outcome = dcgm_exporter.ingest_exposition(
                body.decode("utf-8", "replace"), source="dcgm-exporter", remote_addr=raw.META.get("REMOTE_ADDR") or ""
            )
        except dcgm_exporter.ExpositionError as exc:
            return reject(
                raw, status=400, source="dcgm-exporter", error="invalid exposition", detail=str(exc), body=body
            )
        return Response(
            {
                "accepted": outcome.accepted,
                "duplicates": outcome.duplicates,
                "hosts": outcome.hosts,
                "unknown_hosts": outcome.unknown_hosts,
            }
        )


class NodeGpuHealthView(APIView):
    """GET /api/nodes/{id}/gpu-health/: the node's latest report and GPU rows."""

    @extend_schema(summary="A node's latest GPU health", responses=serializers.NodeGpuHealthSerializer)
    def get(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        health = NodeHealth.objects.filter(node=node).first()
        gpus = GpuState.objects.filter(node=node) if health is not None else GpuState.objects.none()
        data = {"node": node.pk, "hostname": node.hostname, "health": health, "gpus": list(gpus)}
        return Response(serializers.NodeGpuHealthSerializer(data).data)


class NodeGpuSamplesView(APIView):
    """GET /api/nodes/{id}/gpu-samples/: bucketed GPU series over a bounded window."""

    @extend_schema(
        summary="A node's GPU samples, downsampled",
        parameters=[
            OpenApiParameter("gpu", OpenApiTypes.INT, description="One GPU index (default: all)."),
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="Default: one hour before until."),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="Default: now."),
        ],
        responses=serializers.GpuSamplesSerializer,
    )
    def get(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        since, until, gpu = _sample_params(request.query_params)
        count = 1 if gpu is not None else (GpuState.objects.filter(node=node).count() or 1)
        series = gpu_series(node.pk, since=since, until=until, gpu_count=count, gpu=gpu)
        data = {
            "node": node.pk,
            "since": since,
            "until": until,
            "bucket_s": series.bucket_s,
            "fields": FIELDS,
            "gpus": [{"index": i, "points": rows} for i, rows in series.gpus.items()],
        }
        return Response(serializers.GpuSamplesSerializer(data).data)


def _sample_params(params: Any) -> tuple[datetime, datetime, int | None]:
    until = _when(params, "until") or timezone.now()
    since = _when(params, "since") or until - timedelta(hours=1)
    if since >= until:
        raise ValidationError({"since": ["must be before until"]})
    if until - since > MAX_WINDOW:
        raise ValidationError({"since": [f"the window may span at most {MAX_WINDOW.days} days"]})
    gpu = params.get("gpu")
    if gpu in (None, ""):
        return since, until, None
    if not (gpu.isascii() and gpu.isdigit()) or int(gpu) >= MAX_GPUS:
        raise ValidationError({"gpu": [f"must be a GPU index (0, 1, ... {MAX_GPUS - 1})"]})
    return since, until, int(gpu)


def _when(params: Any, name: str) -> datetime | None:
    value = params.get(name)
    if not value:
        return None
    try:
        parsed = parse_datetime(value.replace(" ", "+"))  # a "+" in a query string arrives as a space
    except ValueError:
        parsed = None  # well formed but impossible, such as month 13
    if parsed is None:
        raise ValidationError({name: [f"{value!r} is not an ISO 8601 date-time"]})
    if timezone.is_naive(parsed):
        raise ValidationError({name: ["needs a time zone (e.g. 2026-01-01T00:00:00Z)"]})
    problem = timestamp_problem(parsed)  # an offset PostgreSQL refuses would be a 500
    if problem is not None:
        raise ValidationError({name: [problem]})
    return parsed


# --- the agent command channel (telemetry.commands) -----------------------------------------
COMMAND_ERRORS = {
    403: OpenApiResponse(DetailSerializer, description="The user may not issue commands."),
    404: OpenApiResponse(DetailSerializer, description="No such node visible to the user."),
}


class NodeCommandsView(generics.ListAPIView[AgentCommand]):
    """GET/POST /api/nodes/{id}/commands/: a node's agent commands, newest first, and new ones."""

    serializer_class = serializers.AgentCommandSerializer

    def get_queryset(self) -> QuerySet[AgentCommand]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model, with no request
            return AgentCommand.objects.none()
        node = visible_node_or_404(self.request.user, self.kwargs["pk"])
        return AgentCommand.objects.filter(node=node).order_by("-created", "-id")

    @extend_schema(summary="A node's agent commands, newest first")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.list(request, *args, **kwargs)

    @extend_schema(
        summary="Issue a command to the node's agent (operators; a reason is required)",
        request=serializers.IssueCommandSerializer,
        responses={
            201: serializers.AgentCommandSerializer,
            400: OpenApiResponse(description="Unknown verb, bad args for the verb, bad ttl_s, or no reason."),
            **COMMAND_ERRORS,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        if not request.user.has_perm(OPERATE):
            raise PermissionDenied("You may not issue commands to node agents.")
        body = serializers.IssueCommandSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        command = commands.issue_command(
            node.pk,
            data["verb"],
            args=data["args"],
            actor=Actor(user=request.user),
            reason=data["reason"],
            ttl=timedelta(seconds=data["ttl_s"]),
        )
        return Response(self.get_serializer(command).data, status=status.HTTP_201_CREATED)


def _agent_node_id(request: Request) -> int:
    """The node of the agent that called (IsNodeAgent lets agents in only)."""
    if not isinstance(request.user, AgentIdentity):
        raise NotAuthenticated()
    return request.user.node_id


class AgentCommandsView(APIView):
    """GET /api/agent/commands/: the agent's poll takes its node's queued, unexpired commands."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(summary="Agent: take the node's queued commands", responses=serializers.AgentCommandsSerializer)
    def get(self, request: Request) -> Response:
        taken = commands.deliver_commands(_agent_node_id(request))
        return Response(serializers.AgentCommandsSerializer({"commands": taken}).data)


class AgentStateView(APIView):
    """GET /api/agent/state/: the node's lifecycle state as Nodewarden has it, for the agent's
    scheduler hooks (``nodewarden-slurm-check``: a prolog or HealthCheckProgram refuses work on a
    node out of production). ``reason`` is what the scheduler shows (``scheduler_reason``)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(summary="Agent: the node's lifecycle state", responses=serializers.AgentStateSerializer)
    def get(self, request: Request) -> Response:
        node = Node.objects.only("id", "state").get(pk=_agent_node_id(request))
        in_production = node.state == NodeState.PRODUCTION
        last = last_transition(node)
        reason = ""
        if last is not None and not in_production:
            reason = scheduler_reason(node.state, last.reason, out_of_production_cause(node.pk, last))
        answer = {"state": node.state, "in_production": in_production, "reason": reason}
        return Response(serializers.AgentStateSerializer(answer).data)


class AgentCommandResultView(APIView):
    """POST /api/agent/commands/{id}/result/: the agent reports a command's outcome (idempotent)."""

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        summary="Agent: report a command's outcome",
        request=serializers.CommandResultSerializer,
        responses={
            200: serializers.CommandResultAnswerSerializer,
            400: OpenApiResponse(description="Bad body; each bad field is named."),
            404: OpenApiResponse(DetailSerializer, description="Not a command of this node."),
            409: OpenApiResponse(DetailSerializer, description="The command was never delivered."),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        body = serializers.CommandResultSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            command, changed = commands.record_command_result(
                pk, _agent_node_id(request), result=commands.CommandResult(**body.validated_data)
            )
        except AgentCommand.DoesNotExist as exc:
            raise NotFound() from exc
        except commands.CommandConflict as exc:
            raise Conflict(str(exc)) from exc
        return Response({"id": command.pk, "status": command.status, "changed": changed})


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The command's state does not allow this."
