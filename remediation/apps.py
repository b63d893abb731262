from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Automated remediation"
