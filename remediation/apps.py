from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Automated remediation"

    def ready(self) -> None:
        from . import followups  # noqa: F401  registers its follow-ups of findings, transitions and rejoins
