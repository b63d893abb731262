from django.apps import AppConfig


class RepairsConfig(AppConfig):
    name = "repairs"
    verbose_name = "Repair tickets and RMA cases"

    def ready(self) -> None:
        from nodes.whyhere import why_here_fact

        from .whyhere import open_repair

        why_here_fact(open_repair)  # the node page's header: the open ticket or RMA case and what follows it
