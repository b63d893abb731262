from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "provisioning"
    verbose_name = "Day 0 provisioning"

    def ready(self) -> None:
        from . import netboot  # noqa: F401  registers the Day 0 follow-up (PXE boot through the BMC)
