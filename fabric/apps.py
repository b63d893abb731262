from django.apps import AppConfig


class FabricConfig(AppConfig):
    """InfiniBand fabric: cabling plan, discovery and validation (issue 5; no models yet)."""

    name = "fabric"
    verbose_name = "InfiniBand fabric"
