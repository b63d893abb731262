from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"
    verbose_name = "Fleet reports and metrics"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the outage rows to the state changes)
