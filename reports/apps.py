from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"
    verbose_name = "Fleet reports and metrics"

    def ready(self) -> None:
        from . import followups  # noqa: F401  registers the outage rows' recorders in nodes.followups
