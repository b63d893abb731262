from django.apps import AppConfig


class HealthConfig(AppConfig):
    """Turns signals into findings and alerts: the XID catalog, health rules, findings, alerts."""

    name = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_migrate, post_save

        from . import ruleconfig, xid
        from .models import HealthRule, XidDefinition
        from .seed import ensure_health_defaults

        post_migrate.connect(ensure_health_defaults, sender=self)

        # In-process caches of the hot path: drop them when an operator edits a row.
        for model, invalidate in ((HealthRule, ruleconfig.invalidate_cache), (XidDefinition, xid.invalidate_cache)):
            post_save.connect(lambda *a, _f=invalidate, **k: _f(), sender=model, weak=False)
            post_delete.connect(lambda *a, _f=invalidate, **k: _f(), sender=model, weak=False)
