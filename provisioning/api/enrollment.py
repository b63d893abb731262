"""POST /api/enrollments/: enroll a node by its BMC (operators only)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from checks.api.views import Conflict
from nodes.api.serializers import DetailSerializer
from nodes.models import OPERATE
from nodes.services import Actor

from ..enrollment import DRIVERS, EnrollmentConflict, EnrollmentError, EnrollmentRequest, enroll


class EnrollmentSerializer(serializers.Serializer[Any]):
    """One node to enroll. The BMC password is write-only: no response ever carries it."""

    hostname = serializers.CharField(max_length=253)
    serial = serializers.CharField(max_length=100)
    bmc_address = serializers.CharField(max_length=255, help_text="Redfish base URL, or IPMI host[:port].")
    bmc_driver = serializers.ChoiceField(choices=DRIVERS, default="redfish")
    bmc_system_id = serializers.CharField(max_length=255, required=False, default="", allow_blank=True)
    bmc_username = serializers.CharField(max_length=64)
    bmc_password = serializers.CharField(write_only=True, allow_blank=True, style={"input_type": "password"})
    bmc_verify_tls = serializers.BooleanField(default=True)
    hardware_profile = serializers.CharField(help_text="Hardware profile name.")
    site = serializers.SlugField(help_text="Site slug.")
    cluster = serializers.CharField(required=False, default="", allow_blank=True, help_text="Cluster name.")
    rack = serializers.CharField(required=False, default="", allow_blank=True)
    tenant = serializers.CharField(required=False, default="", allow_blank=True, help_text="Tenant slug.")
    persona = serializers.CharField(required=False, default="", allow_blank=True)
    start = serializers.BooleanField(default=True, help_text="Start Day 0 at once (boot config, PXE boot).")
    reason = serializers.CharField(default="Enrolled through the API")


class EnrolledSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    hostname = serializers.CharField()
    serial = serializers.CharField()
    state = serializers.CharField()


class EnrollmentView(APIView):
    """Enroll a node: its BMC is read first; a duplicate or an unreadable BMC writes nothing."""

    @extend_schema(
        summary="Enroll a node by its BMC",
        request=EnrollmentSerializer,
        responses={
            201: EnrolledSerializer,
            400: OpenApiResponse(
                description="Bad field, unknown reference, or BMC unreadable; each problem named by field."
            ),
            403: OpenApiResponse(DetailSerializer, description="The user may not enroll nodes."),
            409: OpenApiResponse(DetailSerializer, description="Serial, hostname or BMC taken."),
        },
    )
    def post(self, request: Request) -> Response:
        if not request.user.has_perm(OPERATE):
            raise exceptions.PermissionDenied("You may not enroll nodes.")
        body = EnrollmentSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        start, reason = data.pop("start"), data.pop("reason")
        names = {f.name for f in fields(EnrollmentRequest)}
        try:
            node = enroll(
                EnrollmentRequest(**{k: v for k, v in data.items() if k in names}),
                actor=Actor(user=request.user),
                reason=reason,
                start=start,
            )
        except EnrollmentConflict as exc:
            raise Conflict(str(exc)) from exc
        except EnrollmentError as exc:
            raise exceptions.ValidationError(exc.errors) from exc
        # Day 0 starts on commit (Enrolled -> Initializing): answer the state the node is in now.
        node.refresh_from_db(fields=["state"])
        return Response(EnrolledSerializer(node).data, status=status.HTTP_201_CREATED)
