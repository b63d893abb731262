from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    """The fleet simulator. Its label stays "simulator": the migrations and tables predate sandbox/."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "sandbox.simulator"
    label = "simulator"
    verbose_name = "Fleet simulator"

    def ready(self) -> None:
        from fleet.schedulerkinds import register_scheduler_kind

        from .scheduler import SimulatedScheduler

        # Clusters of a running simulation name this kind; the product knows nothing of it.
        register_scheduler_kind(SimulatedScheduler.kind, "Simulated (fleet simulator)", SimulatedScheduler)
