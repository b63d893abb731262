"""Serializers of the operator's provisioning API. The join token hash never leaves the portal;
the clear join token appears in exactly one answer: the one to the provision request."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from nodes.api.serializers import NodeStateSerializer

from ..models import MAX_DNS_SERVERS, BootConfig


class ProvisionSerializer(serializers.Serializer[Any]):
    """Why the node is provisioned, and any boot config fields to set first (all optional;
    the model checks them together, e.g. that the gateway lies in the node's network)."""

    reason = serializers.CharField(allow_blank=False)
    boot_image = serializers.CharField(required=False, allow_blank=True, max_length=100)
    boot_image_url = serializers.URLField(required=False, allow_blank=True, max_length=500)
    kernel_cmdline_extra = serializers.CharField(required=False, allow_blank=True, max_length=500)
    interface_mac = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=17,
        help_text="MAC of the provisioning interface, e.g. 3c:ec:ef:12:34:56.",
    )
    ip_address = serializers.IPAddressField(required=False, allow_null=True, help_text="Null: DHCP.")
    prefix_length = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=128)
    gateway = serializers.IPAddressField(required=False, allow_null=True)
    dns_servers = serializers.ListField(child=serializers.IPAddressField(), required=False, max_length=MAX_DNS_SERVERS)
    mtu = serializers.IntegerField(required=False, allow_null=True, min_value=576, max_value=9216)
    vlan_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=4094)


class BootConfigSerializer(serializers.ModelSerializer[BootConfig]):
    """How the node boots for Day 0 (the instance key is part of seed_url, next to it)."""

    class Meta:
        model = BootConfig
        fields = [
            "generation",
            "boot_image",
            "boot_image_url",
            "kernel_cmdline_extra",
            "interface_mac",
            "ip_address",
            "prefix_length",
            "gateway",
            "dns_servers",
            "mtu",
            "vlan_id",
            "user_data_fetched_at",
            "created",
            "last_updated",
        ]
        read_only_fields = fields


class ProvisionResultSerializer(serializers.Serializer[Any]):
    """What the boot loader needs (kernel command line) and the join token, shown only here."""

    node = NodeStateSerializer()
    boot_config = BootConfigSerializer()
    seed_url = serializers.CharField(help_text="The NoCloud seed: cloud-init fetches meta-data, user-data... here.")
    kernel_cmdline = serializers.CharField(help_text="Append to the kernel command line (quote it in GRUB).")
    instance_id = serializers.CharField(help_text="cloud-init's instance-id for this boot generation.")
    join_token = serializers.CharField(help_text="Single use; also in the node's user-data. Not shown again.")
    join_token_prefix = serializers.CharField()
    join_token_expires_at = serializers.DateTimeField()
    kubernetes_bootstrap_token = serializers.CharField(
        allow_null=True,
        help_text="Kubernetes clusters only: register it in the cluster "
        "(kubeadm token create <token> --ttl ...) before the node boots.",
    )
