"""Serializers for the fleet inventory: full ones for its own endpoints, brief ones
for nesting inside a node."""

from __future__ import annotations

from rest_framework import serializers

from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant


# --- Brief: enough to name and link a related object from a node ---------
class BriefSiteSerializer(serializers.ModelSerializer[Site]):
    """A site as a node names it."""

    class Meta:
        model = Site
        fields = ["id", "name", "slug"]


class BriefClusterSerializer(serializers.ModelSerializer[Cluster]):
    """A cluster as a node names it."""

    class Meta:
        model = Cluster
        fields = ["id", "name"]


class BriefRackSerializer(serializers.ModelSerializer[Rack]):
    """A rack as a node names it (its site is the node's site)."""

    class Meta:
        model = Rack
        fields = ["id", "name"]


class BriefTenantSerializer(serializers.ModelSerializer[Tenant]):
    """A tenant as a node names it."""

    class Meta:
        model = Tenant
        fields = ["id", "name", "slug"]


class BriefHardwareProfileSerializer(serializers.ModelSerializer[HardwareProfile]):
    """A hardware profile as a node names it."""

    class Meta:
        model = HardwareProfile
        fields = ["id", "name"]


class BriefPersonaSerializer(serializers.ModelSerializer[Persona]):
    """A persona as a node names it."""

    class Meta:
        model = Persona
        fields = ["id", "name"]


# --- Full: the fleet endpoints ----------------------------------------------
class SiteSerializer(serializers.ModelSerializer[Site]):
    """A data centre or hall."""

    url = serializers.HyperlinkedIdentityField(view_name="api:site-detail")

    class Meta:
        model = Site
        fields = ["id", "url", "name", "slug", "location"]


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    """A group of nodes in one site sharing one workload scheduler."""

    url = serializers.HyperlinkedIdentityField(view_name="api:cluster-detail")
    site = BriefSiteSerializer(read_only=True)

    class Meta:
        model = Cluster
        fields = ["id", "url", "name", "site", "scheduler_kind", "scheduler_endpoint"]


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    """A customer organisation that rents nodes."""

    url = serializers.HyperlinkedIdentityField(view_name="api:tenant-detail")

    class Meta:
        model = Tenant
        fields = ["id", "url", "name", "slug"]


class HardwareProfileSerializer(serializers.ModelSerializer[HardwareProfile]):
    """A SKU: what a node of this kind must contain, and its firmware baseline."""

    url = serializers.HyperlinkedIdentityField(view_name="api:hardwareprofile-detail")

    class Meta:
        model = HardwareProfile
        fields = [
            "id",
            "url",
            "name",
            "gpu_model",
            "gpu_count",
            "hca_count",
            "hca_rate_gbps",
            "memory_gb",
            "firmware_baseline",
        ]


class PersonaSerializer(serializers.ModelSerializer[Persona]):
    """The role a node is given (training, inference, ...)."""

    url = serializers.HyperlinkedIdentityField(view_name="api:persona-detail")

    class Meta:
        model = Persona
        fields = ["id", "url", "name", "description"]
