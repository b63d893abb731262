from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """What node agents and exporters report: ingest, latest state per node and GPU, history."""

    name = "telemetry"
    verbose_name = "Telemetry"
