from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Automated remediation"

    def ready(self) -> None:
        from nodes.whyhere import why_here_fact

        from . import followups  # noqa: F401  registers its follow-ups of findings, transitions and rejoins
        from .whyhere import open_remediation

        why_here_fact(open_remediation)  # the node page's header: the open remediation and its next step
