from django.apps import AppConfig
from django.db.models.signals import post_migrate


class NodesConfig(AppConfig):
    name = "nodes"
    verbose_name = "Nodes"

    def ready(self) -> None:
        from .roles import ensure_roles

        post_migrate.connect(ensure_roles, sender=self)
