"""Day 0 records: how a node boots (BootConfig) and how its agent proves it may join (JoinToken)."""

from __future__ import annotations

import ipaddress
import re
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .choices import JoinTokenStatus
from .tokens import join_token_for, kubeadm_token_for

_MAC = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")
_DATASOURCE = re.compile(r"(^|\s)ds=")
# resolv.conf reads at most three nameservers; more would be silently ignored on the node.
MAX_DNS_SERVERS = 3


def new_instance_key() -> str:
    """256 random bits, URL-safe: the NoCloud seed URL is the only thing that names a node's seed."""
    return secrets.token_urlsafe(32)


class BootConfig(models.Model):
    """How one node boots for Day 0: image, kernel command line, and its provisioning network.

    ``instance_key`` is the secret part of the node's NoCloud seed URL; ``generation``
    counts ``prepare_boot`` calls and is part of cloud-init's instance-id, so a
    re-provisioned node runs its first-boot modules again.
    """

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="boot_config")
    instance_key = models.CharField(max_length=64, unique=True, default=new_instance_key, editable=False)
    generation = models.PositiveIntegerField(default=0, editable=False)
    boot_image = models.CharField(max_length=100, blank=True, help_text="OS image name, e.g. ubuntu-24.04-gpu.")
    boot_image_url = models.URLField(max_length=500, blank=True, help_text="Where the boot loader fetches it.")
    kernel_cmdline_extra = models.CharField(
        max_length=500,
        blank=True,
        help_text="Appended to the kernel command line after the NoCloud seed.",
    )
    interface_mac = models.CharField(
        max_length=17,
        blank=True,
        verbose_name="provisioning interface MAC",
        help_text="Empty: DHCP on every en* interface (only without a static address).",
    )
    ip_address = models.GenericIPAddressField(null=True, blank=True, help_text="Empty: DHCP.")
    prefix_length = models.PositiveSmallIntegerField(null=True, blank=True)
    gateway = models.GenericIPAddressField(null=True, blank=True)
    dns_servers = models.JSONField(default=list, blank=True, help_text='e.g. ["10.0.0.53", "10.0.1.53"].')
    mtu = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(576), MaxValueValidator(9216)],
    )
    vlan_id = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        verbose_name="VLAN",
        validators=[MinValueValidator(1), MaxValueValidator(4094)],
    )
    # Last time cloud-init fetched user-data: the first sign of life of a booting node.
    user_data_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    last_updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node__hostname"]

    def __str__(self) -> str:
        return f"boot config of node {self.node_id}"

    @property
    def is_static(self) -> bool:
        return self.ip_address is not None

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
        if self.ip_address is None or self.prefix_length is None:
            return None
        return ipaddress.ip_interface(f"{self.ip_address}/{self.prefix_length}")

    def clean(self) -> None:
        errors: dict[str, str] = {}
        self.ip_address, self.gateway = self.ip_address or None, self.gateway or None  # blank means DHCP
        self.interface_mac = (self.interface_mac or "").strip().lower()
        if self.interface_mac:
            if not _MAC.match(self.interface_mac):
                errors["interface_mac"] = (
                    f"{self.interface_mac!r} is not a MAC address: write six hex pairs, e.g. 3c:ec:ef:12:34:56."
                )
            self.interface_mac = self.interface_mac.replace("-", ":")
        errors.update(self._address_errors())
        errors.update(self._dns_errors())
        if _DATASOURCE.search(self.kernel_cmdline_extra) or any(ord(c) < 32 for c in self.kernel_cmdline_extra):
            errors["kernel_cmdline_extra"] = (
                "Must not hold control characters or a ds= datasource: the NoCloud seed is set by Nodewarden."
            )
        if errors:
            raise ValidationError(errors)

    def _address_errors(self) -> dict[str, str]:
        try:
            return self._check_addresses()
        except (TypeError, ValueError):  # a field that failed its own validation; its error says why
            return {}

    def _check_addresses(self) -> dict[str, str]:
        ip, prefix, gateway = self.ip_address, self.prefix_length, self.gateway
        if ip is None:
            if prefix is not None:
                return {"ip_address": "Required with a prefix length (or clear the prefix for DHCP)."}
            return {"gateway": "A gateway needs a static IP address (DHCP brings its own)."} if gateway else {}
        version = ipaddress.ip_address(ip).version
        bits = 32 if version == 4 else 128
        if prefix is None or not 1 <= prefix <= bits:
            return {"prefix_length": f"Required with a static IPv{version} address: 1 to {bits}."}
        if not self.interface_mac:
            return {"interface_mac": "Required with a static address: it names the interface to configure."}
        if gateway is None:
            return {}
        network = ipaddress.ip_interface(f"{ip}/{prefix}").network
        if ipaddress.ip_address(gateway).version != version or ipaddress.ip_address(gateway) not in network:
            return {"gateway": f"{gateway} is not in the node's network {network}."}
        if gateway == ip:
            return {"gateway": "The gateway cannot be the node's own address."}
        return {}

    def _dns_errors(self) -> dict[str, str]:
        servers = self.dns_servers
        if not isinstance(servers, list):
            return {"dns_servers": 'Must be a list of IP addresses, e.g. ["10.0.0.53"].'}
        if len(servers) > MAX_DNS_SERVERS:
            return {"dns_servers": f"At most {MAX_DNS_SERVERS} servers (the resolver ignores the rest)."}
        for index, server in enumerate(servers):
            try:
                ipaddress.ip_address(server if isinstance(server, str) else "")
            except ValueError:
                return {"dns_servers": f"Item {index}: {server!r} is not an IP address."}
        return {}


class JoinToken(models.Model):
    """A single-use, short-lived credential that lets a freshly booted node's agent join.

    Only the token's SHA-256 and the salt it is derived from are stored (see
    ``provisioning.tokens``). It is consumed by a compare-and-swap UPDATE in
    ``services.join``. For a Kubernetes cluster it carries the kubeadm bootstrap token
    issued with it (id in clear, secret hashed), which shares its lifetime.
    """

    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="join_tokens")
    generation = models.PositiveIntegerField(help_text="The boot config generation it was issued for.")
    key_hash = models.CharField(max_length=64, unique=True)
    salt = models.CharField(max_length=32)
    prefix = models.CharField(max_length=12, help_text="The token's first characters, to tell tokens apart.")
    kubeadm_token_id = models.CharField(max_length=6, blank=True)
    kubeadm_secret_hash = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["node", "-created"])]
        constraints = [
            # Kubernetes keys bootstrap tokens by id; two live ones with one id would shadow each other.
            models.UniqueConstraint(
                fields=["kubeadm_token_id"], condition=~models.Q(kubeadm_token_id=""), name="unique_kubeadm_token_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… for node {self.node_id}"

    def status_at(self, now: Any = None) -> str:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return JoinTokenStatus.REVOKED
        if self.used_at is not None:
            return JoinTokenStatus.USED
        return JoinTokenStatus.EXPIRED if self.expires_at <= now else JoinTokenStatus.LIVE

    @property
    def status(self) -> str:
        return self.status_at()

    def clear_token(self) -> str:
        """The token itself, derived again from the salt (see provisioning.tokens)."""
        return join_token_for(self.salt)

    def kubeadm_token(self) -> str:
        """The kubeadm bootstrap token ``<id>.<secret>``, or "" where none was issued."""
        return kubeadm_token_for(self.kubeadm_token_id, self.salt) if self.kubeadm_token_id else ""
