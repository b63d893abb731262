from django.apps import AppConfig


class ValidationConfig(AppConfig):
    name = "validation"
    verbose_name = "Day 1 validation"

    def ready(self) -> None:
        from nodes.whyhere import why_here_fact

        from . import followups  # noqa: F401  registers the Day 1 follow-ups
        from .whyhere import day1_stage

        why_here_fact(day1_stage)  # the node page's header: the stage that runs and the stages ahead
