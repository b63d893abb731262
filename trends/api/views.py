"""REST endpoints of trends (staff only: anyone else is told they do not exist): trend flags
with the list page's filters, and the last evaluation's top lemon nodes. Read-only: flags
change only through the daily evaluation (``trends.services``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, mixins, permissions, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from nodes.permissions import StaffOnly

from .. import analysis
from ..filters import TrendFlagFilterSet
from ..models import TrendFlag, TrendRun
from . import serializers


@extend_schema_view(list=extend_schema(summary="List trend flags, newest first"))
class TrendFlagViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[TrendFlag]):
    """Trend flags: degrading figures, underperformers against their profile's peers, lemon nodes."""

    # node and its profile: the hostname and hardware_profile columns of every row.
    queryset = TrendFlag.objects.select_related("node__hardware_profile").order_by("-created", "-id")
    serializer_class = serializers.TrendFlagSerializer
    filterset_class = TrendFlagFilterSet
    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    ordering_fields = ["created", "updated", "score"]


class LemonsView(generics.GenericAPIView[Any]):
    """The last evaluation's top lemon nodes (highest score first), flagged or not."""

    serializer_class = serializers.LemonReportSerializer
    permission_classes = [permissions.IsAuthenticated, StaffOnly]
    pagination_class = None
    filter_backends: list[Any] = []

    @extend_schema(summary="Top lemon nodes of the last trend evaluation")
    def get(self, request: Request) -> Response:
        run = TrendRun.objects.filter(finished__isnull=False).first()
        report = {
            "run": run.pk if run else None,
            "evaluated_at": run.started if run else None,
            "window_days": analysis.LEMON_WINDOW_DAYS,
            "threshold": analysis.LEMON_THRESHOLD,
            "weights": {s.name: s.weight for s in analysis.LEMON_SIGNALS},
            "results": run.top_lemons if run else [],
        }
        return Response(self.get_serializer(report).data)
