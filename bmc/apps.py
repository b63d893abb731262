from django.apps import AppConfig


class BmcConfig(AppConfig):
    name = "bmc"
    verbose_name = "BMC (out-of-band control)"

    def ready(self) -> None:
        from . import system_checks  # noqa: F401 - registers the system checks
