"""REST endpoints: findings, alerts (with operator verbs), rules, the XID catalog, the Alertmanager receiver.

Querysets start from ``health.scoping``: another tenant's alert answers 404; verbs need
``nodes.operate_node`` and go through ``health.alerts``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodes.api.serializers import DetailSerializer
from nodes.permissions import CanOperate, CanOperateObject
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden.api import error_body, read_bounded

from .. import alertmanager, customer_reports
from .. import alerts as verbs
from ..filters import AlertFilterSet, FindingFilterSet
from ..models import Alert, Finding, HealthRule, XidDefinition
from ..scoping import visible_alerts, visible_findings
from . import serializers


@extend_schema_view(list=extend_schema(summary="List findings"), retrieve=extend_schema(summary="One finding"))
class FindingViewSet(viewsets.ReadOnlyModelViewSet[Finding]):
    """Findings: every rule firing, with evidence (append-only)."""

    serializer_class = serializers.FindingSerializer
    filterset_class = FindingFilterSet
    ordering_fields = ["created", "observed_at"]

    def get_queryset(self) -> QuerySet[Finding]:
        return visible_findings(self.request.user).order_by("-created", "-id")


@extend_schema_view(
    list=extend_schema(summary="List alerts (firing and unsilenced unless filtered)"),
    retrieve=extend_schema(summary="One alert"),
)
class AlertViewSet(viewsets.ReadOnlyModelViewSet[Alert]):
    """Alerts: deduplicated conditions per node, with acknowledge, silence, unsilence and resolve."""

    serializer_class = serializers.AlertSerializer
    filterset_class = AlertFilterSet
    permission_classes = [permissions.IsAuthenticated, CanOperateObject]
    permission_denied_message = "You may not act on alerts."
    ordering_fields = ["last_seen", "first_seen", "severity_rank"]

    def get_queryset(self) -> QuerySet[Alert]:
        # node: the hostname column; the two users: acknowledged_by and silenced_by.
        return (
            visible_alerts(self.request.user)
            .select_related("node", "acknowledged_by", "silenced_by")
            .order_by("-severity_rank", "-last_seen", "-id")
        )

    def _act(self, request: Request, body_class: type, verb: Callable[..., Alert], **fixed: Any) -> Response:
        alert = self.get_object()
        body = body_class(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            verb(alert.pk, actor=Actor(user=request.user), **fixed, **body.validated_data)
        except verbs.AlertNotFiring as exc:
            raise exceptions.ValidationError({"state": [str(exc)]}) from exc
        except ObjectDoesNotExist as exc:
            raise exceptions.NotFound() from exc
        except ValueError as exc:
            raise exceptions.ValidationError({"until": [str(exc)]}) from exc
        fresh = self.get_queryset().get(pk=alert.pk)
        return Response(serializers.AlertSerializer(fresh).data, status=status.HTTP_200_OK)

    @extend_schema(summary="Acknowledge an alert", request=serializers.AcknowledgeSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.AcknowledgeSerializer, verbs.acknowledge)

    @extend_schema(summary="Silence an alert", request=serializers.SilenceSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def silence(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.SilenceSerializer, verbs.silence)

    @extend_schema(summary="Lift a silence", request=serializers.ReasonSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def unsilence(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.ReasonSerializer, verbs.unsilence)

    @extend_schema(summary="Resolve an alert by hand", request=serializers.ReasonSerializer)
    @action(detail=True, methods=["post"], filter_backends=[])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, serializers.ReasonSerializer, verbs.resolve)


class HealthRuleViewSet(viewsets.ReadOnlyModelViewSet[HealthRule]):
    """Health rules and their thresholds (edited in the admin, with a reason)."""

    serializer_class = serializers.HealthRuleSerializer
    filterset_fields = ["key", "enabled", "shadow"]
    # hardware_profile: its name is shown on every row.
    queryset = HealthRule.objects.select_related("hardware_profile").order_by("key", "id")


class XidDefinitionViewSet(viewsets.ReadOnlyModelViewSet[XidDefinition]):
    """The XID catalog: GET /api/xid-catalog/79/."""

    serializer_class = serializers.XidDefinitionSerializer
    queryset = XidDefinition.objects.order_by("xid")
    filterset_fields = ["severity", "recommended_action"]


class RawJSONParser(BaseParser):
    """Hand the body to msgspec untouched: its errors name the exact field."""

    media_type = "application/json"

    # DRF hands on whatever parse returns as request.data; the stubs allow mappings only.
    def parse(  # type: ignore[override]
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> bytes:
        return read_bounded(stream)


class AlertmanagerWebhookView(APIView):
    """Prometheus Alertmanager webhook receiver (webhook JSON version 4)."""

    parser_classes = [RawJSONParser]
    permission_classes = [permissions.IsAuthenticated, CanOperate]
    permission_denied_message = "Posting alerts needs the permission to operate nodes."

    @extend_schema(
        summary="Receive an Alertmanager webhook",
        request={"application/json": dict},
        responses=serializers.WebhookResultSerializer,
    )
    def post(self, request: Request) -> Response:
        try:
            # The body's bytes (RawJSONParser); with no body at all DRF gives an empty QueryDict.
            hook = alertmanager.decode(request.data if isinstance(request.data, bytes) else b"")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return Response(
                error_body(f"Malformed Alertmanager webhook: {exc}", "parse_error"), status=status.HTTP_400_BAD_REQUEST
            )
        outcome = alertmanager.receive(hook, actor=Actor(user=request.user))
        return Response({"accepted": outcome.accepted, "resolved": outcome.resolved, "unmatched": outcome.unmatched})


class ReportBadNodeView(APIView):
    """A customer reports a node they believe is bad: a finding with them as its source
    (``health.customer_reports``); a second report while one is open is a note on the history."""

    @extend_schema(
        summary="Report a node as bad (a customer's finding)",
        request=serializers.ReportBadNodeSerializer,
        responses={
            201: serializers.ReportBadNodeAnswerSerializer,
            200: OpenApiResponse(serializers.ReportBadNodeAnswerSerializer, description="A report is open: noted."),
            403: OpenApiResponse(DetailSerializer, description="Only the node's tenant (or an operator) reports it."),
            404: OpenApiResponse(DetailSerializer, description="No such node visible to the user."),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        if not customer_reports.may_report(request.user, node):  # before the body: 403 whatever was sent
            raise exceptions.PermissionDenied("Only the node's tenant can report it as bad.")
        body = serializers.ReportBadNodeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            report = customer_reports.report_bad_node(node.pk, user=request.user, **body.validated_data)
        except customer_reports.NotYourNode as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        except ObjectDoesNotExist as exc:  # gone between the lookup and the lock
            raise exceptions.NotFound() from exc
        except ValueError as exc:  # ReasonRequired too: a reason of blanks only
            raise exceptions.ValidationError({"reason": [str(exc)]}) from exc
        answer = {
            "duplicate": report.duplicate,
            "finding": report.finding.pk if report.finding else None,
            "event": report.event.pk,
        }
        code = status.HTTP_200_OK if report.duplicate else status.HTTP_201_CREATED
        return Response(serializers.ReportBadNodeAnswerSerializer(answer).data, status=code)
