from django.apps import AppConfig


class FeedsConfig(AppConfig):
    """Lifecycle events as a feed: a cursor API and signed CloudEvents webhooks."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "feeds"
    verbose_name = "Event feed"
