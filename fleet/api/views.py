"""Read-only REST endpoints for the fleet inventory.

Sites, clusters, hardware profiles and personas are shared vocabulary every
user may read; tenants are scoped, so a customer sees only its own.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import viewsets

from fleet.models import Cluster, HardwareProfile, Persona, Site, Tenant
from fleet.scoping import visible_tenants

from . import serializers


class FleetViewSet(viewsets.ReadOnlyModelViewSet[Any]):
    """List and detail, sortable by name (``?ordering=name`` or ``-name``)."""

    ordering_fields = ["name"]


class SiteViewSet(FleetViewSet):
    """Data centres and halls."""

    queryset = Site.objects.all()
    serializer_class = serializers.SiteSerializer


class ClusterViewSet(FleetViewSet):
    """Clusters, each with its site."""

    queryset = Cluster.objects.select_related("site")  # every row names its site: one join, not one query per row
    serializer_class = serializers.ClusterSerializer


class TenantViewSet(FleetViewSet):
    """Customer organisations; a customer's user sees only its own."""

    serializer_class = serializers.TenantSerializer

    def get_queryset(self) -> QuerySet[Tenant]:
        return visible_tenants(self.request.user)


class HardwareProfileViewSet(FleetViewSet):
    """SKUs and their firmware baselines."""

    queryset = HardwareProfile.objects.all()
    serializer_class = serializers.HardwareProfileSerializer


class PersonaViewSet(FleetViewSet):
    """Node roles (training, inference, ...)."""

    queryset = Persona.objects.all()
    serializer_class = serializers.PersonaSerializer
