from django.apps import AppConfig


class HealthConfig(AppConfig):
    """Turns signals into findings and alerts: the XID catalog, health rules, findings, alerts."""

    name = "health"
    verbose_name = "Health"
