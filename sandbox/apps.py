from django.apps import AppConfig


class SandboxConfig(AppConfig):
    """Hosts the demo's management commands (seed_demo, demo_bmc, demo_fabric, demo_schedulers)."""

    name = "sandbox"
    verbose_name = "Sandbox (demo)"
