from django.apps import AppConfig


class SchedulersConfig(AppConfig):
    name = "schedulers"
    verbose_name = "Workload schedulers"

    def ready(self) -> None:
        from . import reactions  # noqa: F401  registers the scheduler reactions of every transition
