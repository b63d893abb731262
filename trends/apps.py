from django.apps import AppConfig


class TrendsConfig(AppConfig):
    name = "trends"
    verbose_name = "Trends, peers and lemon nodes"
