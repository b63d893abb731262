"""REST endpoints of remediation: remediations (scoped like nodes: another tenant's answers
404) with the operator's approve, skip-rung and stop; holds and circuit breakers (staff
only). Writes need ``nodes.operate_node`` and go through ``remediation.services``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, generics, mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from checks.api.views import Conflict
from nodes.api.serializers import DetailSerializer
from nodes.permissions import CanOperateObject, StaffOnly
from nodes.scoping import visible_node_or_404
from nodes.services import Actor

from .. import services, summary
from ..filters import CircuitBreakerFilterSet, HoldFilterSet, RemediationFilterSet
from ..machine import RemediationConflict
from ..models import CircuitBreaker, Hold, Remediation
from . import serializers

FORBIDDEN = OpenApiResponse(DetailSerializer, description="The user may not operate nodes.")
NOT_FOUND = OpenApiResponse(DetailSerializer, description="Nothing with this id visible to the user.")
ERRORS = {
    400: OpenApiResponse(description="No reason given."),
    403: FORBIDDEN,
    404: NOT_FOUND,
    409: OpenApiResponse(DetailSerializer, description="Its state does not allow this."),
}


def _run(verb: Callable[[], Any]) -> Any:
    """The service's refusals as HTTP answers (ReasonRequired is a 400 in the project's handler)."""
    try:
        return verb()
    except RemediationConflict as exc:
        raise Conflict(str(exc)) from exc
    except services.RemediationForbidden as exc:
        raise exceptions.PermissionDenied(str(exc)) from exc
    except ObjectDoesNotExist as exc:
        raise exceptions.NotFound() from exc


def _reason(request: Request) -> str:
    body = serializers.RemediationReasonSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return str(body.validated_data["reason"])


def remediations_for(user: Any) -> QuerySet[Remediation]:
    # node: the hostname column; finding: its summary; policy: its name; steps: every rung tried.
    return (
        summary.visible_remediations(user)
        .select_related("node", "finding", "policy")
        .prefetch_related("steps")
        .order_by("-created", "-id")
    )


@extend_schema_view(
    list=extend_schema(summary="List remediations, newest first"),
    retrieve=extend_schema(summary="One remediation with its steps and decisions"),
)
class RemediationViewSet(viewsets.ReadOnlyModelViewSet[Remediation]):
    """Remediations: one incident on one node each, up the ladder, with every decision."""

    filterset_class = RemediationFilterSet
    permission_classes = [permissions.IsAuthenticated, CanOperateObject]
    permission_denied_message = "You may not operate remediations."
    ordering_fields = ["created", "updated", "finished"]

    serializer_class = serializers.RemediationSerializer

    def get_queryset(self) -> QuerySet[Remediation]:
        return remediations_for(self.request.user)

    def _act(self, request: Request, verb: Callable[..., Remediation]) -> Response:
        rem = self.get_object()
        reason = _reason(request)
        _run(lambda: verb(rem.pk, actor=Actor(user=request.user), reason=reason))
        fresh = self.get_queryset().get(pk=rem.pk)
        return Response(serializers.RemediationSerializer(fresh).data, status=status.HTTP_200_OK)

    @extend_schema(
        summary="Approve a remediation awaiting approval",
        request=serializers.RemediationReasonSerializer,
        responses={200: serializers.RemediationSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, services.approve)

    @extend_schema(
        summary="Skip the current rung and climb to the next",
        request=serializers.RemediationReasonSerializer,
        responses={200: serializers.RemediationSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], url_path="skip-rung", filter_backends=[])
    def skip_rung(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, services.skip_rung)

    @extend_schema(
        summary="Stop the automated plan (the node stays where it is)",
        request=serializers.RemediationReasonSerializer,
        responses={200: serializers.RemediationSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        return self._act(request, services.stop)


class NodeRemediationsView(generics.ListAPIView[Remediation]):
    """A node's remediations, newest first."""

    serializer_class = serializers.RemediationSerializer
    queryset = Remediation.objects.none()  # for the schema; the real rows come from get_queryset

    def get_queryset(self) -> QuerySet[Remediation]:
        node = visible_node_or_404(self.request.user, self.kwargs["pk"])
        return remediations_for(self.request.user).filter(node=node)

    @extend_schema(summary="A node's remediations, newest first")
    def get(self, request: Request, *args: object, **kwargs: object) -> Response:
        return super().get(request, *args, **kwargs)


@extend_schema_view(list=extend_schema(summary="List holds, newest first"))
class HoldViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Hold]):
    """Holds: no automated action on a node or domain until released (or until ``until``)."""

    # The four possible targets: the hold's node hostname and cluster name are on every row.
    queryset = Hold.objects.select_related("node", "cluster").order_by("-created", "-id")
    serializer_class = serializers.HoldSerializer
    filterset_class = HoldFilterSet
    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    permission_denied_message = "You may not operate remediations."

    @extend_schema(
        summary="Place a hold",
        request=serializers.HoldRequestSerializer,
        responses={
            201: serializers.HoldSerializer,
            400: OpenApiResponse(description="Bad target or reason."),
            403: FORBIDDEN,
        },
    )
    def create(self, request: Request) -> Response:
        body = serializers.HoldRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        ids = {f"{name}_id": data[name].pk for name in ("node", "cluster", "rack", "tenant") if data.get(name)}
        hold = _run(
            lambda: services.place_hold(
                actor=Actor(user=request.user), reason=data["reason"], until=data.get("until"), **ids
            )
        )
        return Response(
            serializers.HoldSerializer(self.get_queryset().get(pk=hold.pk)).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(
        summary="Release a hold",
        request=serializers.RemediationReasonSerializer,
        responses={200: serializers.HoldSerializer, 400: ERRORS[400], 403: FORBIDDEN, 404: NOT_FOUND},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def release(self, request: Request, pk: str | None = None) -> Response:
        hold = self.get_object()
        reason = _reason(request)
        _run(lambda: services.release_hold(hold.pk, actor=Actor(user=request.user), reason=reason))
        return Response(serializers.HoldSerializer(self.get_queryset().get(pk=hold.pk)).data)


@extend_schema_view(list=extend_schema(summary="List circuit breakers, newest first"))
class CircuitBreakerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[CircuitBreaker]):
    """Circuit breakers: a cluster's automated actions stop when its findings spike."""

    queryset = CircuitBreaker.objects.select_related("cluster").order_by("-tripped_at", "-id")  # cluster: its name
    serializer_class = serializers.CircuitBreakerSerializer
    filterset_class = CircuitBreakerFilterSet
    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    permission_denied_message = "You may not operate remediations."

    @extend_schema(
        summary="Reset a tripped breaker: automated actions resume in its cluster",
        request=serializers.RemediationReasonSerializer,
        responses={200: serializers.CircuitBreakerSerializer, **ERRORS},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def reset(self, request: Request, pk: str | None = None) -> Response:
        breaker = self.get_object()
        reason = _reason(request)
        _run(lambda: services.reset_breaker(breaker.pk, actor=Actor(user=request.user), reason=reason))
        return Response(serializers.CircuitBreakerSerializer(self.get_queryset().get(pk=breaker.pk)).data)
