from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Automated remediation"

    def ready(self) -> None:
        from health.handled import handled_by
        from nodes.whyhere import why_here_fact

        from . import followups  # noqa: F401  registers its follow-ups of findings, transitions and rejoins
        from .bulk import register_node_actions
        from .whyhere import node_hold, open_remediation, open_remediations

        why_here_fact(open_remediation)  # the node page's header: the open remediation and its next step
        why_here_fact(node_hold)  # ... and a hold that pauses automated remediation on the node
        handled_by(open_remediations)  # the alert list's rows: the open remediation of the alert's node
        register_node_actions()  # the node list's bulk bar (nodewarden.bulk; nodes never imports remediation)
