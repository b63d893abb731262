"""API representation of a BMC endpoint: the password can be written, never read."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..models import BmcEndpoint


class BmcEndpointSerializer(serializers.ModelSerializer[BmcEndpoint]):
    """Endpoint fields for the API. A blank or missing password on update keeps the stored one."""

    password = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=False, style={"input_type": "password"}
    )

    class Meta:
        model = BmcEndpoint
        fields = [
            "id",
            "node",
            "driver",
            "address",
            "system_id",
            "username",
            "password",
            "verify_tls",
            "last_contact_at",
            "last_error",
            "created",
            "last_updated",
        ]
        read_only_fields = ["last_contact_at", "last_error", "created", "last_updated"]

    def update(self, instance: BmcEndpoint, validated_data: dict[str, Any]) -> BmcEndpoint:
        if not validated_data.get("password"):
            validated_data.pop("password", None)
        return super().update(instance, validated_data)
