"""How Nodewarden reaches each node's BMC (baseboard management controller)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models

from .choices import BmcDriverKind
from .fields import EncryptedTextField


def validate_bmc_address(value: str) -> None:
    """Credentials live in username/password (encrypted), never in the address, which is shown everywhere."""
    netloc = urlsplit(value).netloc if "://" in value else value
    if "@" in netloc:
        raise ValidationError("Put the BMC user and password in their own fields, not in the address.")


class BmcEndpoint(models.Model):
    """One node's BMC: protocol, address, credentials (encrypted at rest) and the last contact.

    ``address`` is a base URL for Redfish (``https://10.0.0.5``) and ``host`` or
    ``host:port`` for IPMI. ``system_id`` picks the Redfish ComputerSystem when a
    BMC serves several (its Id, UUID or ``/redfish/v1/Systems/<id>``); blank means
    the only one. ``last_contact_at`` and ``last_error`` are written by
    ``bmc.client`` after every call; ``last_power_state`` (and when) after every call that
    read the power state, so pages show it without asking the BMC live. ``last_poll_at`` is when
    the power poller (``bmc.services.poll_power_states``) last tried it, answered or not.
    """

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="bmc")
    driver = models.CharField(max_length=16, choices=BmcDriverKind.choices, default=BmcDriverKind.REDFISH)
    address = models.CharField(
        max_length=255,
        validators=[validate_bmc_address],
        help_text="Redfish: base URL such as https://10.0.0.5. IPMI: host or host:port (623 by default).",
    )
    system_id = models.CharField(
        max_length=255,
        blank=True,
        help_text="Redfish system Id, UUID or /redfish/v1/Systems/<id>; blank for the BMC's only system.",
    )
    username = models.CharField(max_length=64)
    password = EncryptedTextField(blank=True)
    verify_tls = models.BooleanField(default=True, verbose_name="verify TLS certificate")
    last_contact_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_power_state = models.CharField(max_length=10, blank=True, help_text="on, off or unknown, as last read.")
    last_power_state_at = models.DateTimeField(null=True, blank=True)
    # When the poller last tried this endpoint, answered or not: it takes the oldest first, so a
    # BMC that never answers goes to the back of the queue instead of holding the batch forever.
    last_poll_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    last_updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node"]
        verbose_name = "BMC endpoint"

    def __str__(self) -> str:
        return f"{self.get_driver_display()} {self.address}"

    def __repr__(self) -> str:
        # Model.__repr__ uses __str__ already; spelled out so no later edit adds the password.
        return f"<BmcEndpoint node={self.node_id} {self.driver} {self.address}>"
