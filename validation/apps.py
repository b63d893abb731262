from django.apps import AppConfig


class ValidationConfig(AppConfig):
    name = "validation"
    verbose_name = "Day 1 validation"
