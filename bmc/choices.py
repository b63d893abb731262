"""Choices for the bmc app: which protocol speaks to a node's BMC."""

from __future__ import annotations

from django.db import models


class BmcDriverKind(models.TextChoices):
    """The out-of-band protocol Nodewarden uses for a BMC."""

    REDFISH = "redfish", "Redfish"
    IPMI = "ipmi", "IPMI (lanplus)"
