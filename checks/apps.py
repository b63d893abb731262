from django.apps import AppConfig


class ChecksConfig(AppConfig):
    name = "checks"
    verbose_name = "Checks and task runs"
