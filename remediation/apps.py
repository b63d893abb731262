from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Automated remediation"

    def ready(self) -> None:
        from . import followups  # noqa: F401  registers the finding receiver and lifecycle follow-ups
