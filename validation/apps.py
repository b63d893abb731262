from django.apps import AppConfig


class ValidationConfig(AppConfig):
    name = "validation"
    verbose_name = "Day 1 validation"

    def ready(self) -> None:
        from . import followups  # noqa: F401  registers the Day 1 follow-ups
