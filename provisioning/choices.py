"""Enumerations of Day 0 provisioning."""

from django.db import models


class JoinTokenStatus(models.TextChoices):
    """Where a join token is in its short life (derived from its timestamps, never stored)."""

    LIVE = "live", "Live"
    USED = "used", "Used"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"


class CloudInitPart(models.TextChoices):
    """The files of a NoCloud seed, as cloud-init fetches them from ``<seed URL><name>``."""

    META_DATA = "meta-data", "meta-data"
    USER_DATA = "user-data", "user-data"
    VENDOR_DATA = "vendor-data", "vendor-data"
    NETWORK_CONFIG = "network-config", "network-config"
