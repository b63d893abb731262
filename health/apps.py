from django.apps import AppConfig


class HealthConfig(AppConfig):
    """Turns signals into findings and alerts: the XID catalog, health rules, findings, alerts.
    Registers the rules as the consumer of ingested telemetry (``telemetry.consumers``), and a
    GPU-naming finding's suspicion of its GPU as a follow-up of new findings (``health.gpus``)."""

    name = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_migrate, post_save

        from nodes.followups import followup
        from nodes.whyhere import why_here_fact
        from telemetry.consumers import NodeRows, ReportConsumer, consumes_reports

        from . import ruleconfig, xid
        from .choices import AlertState
        from .evaluation import OPEN_ALERT_FIELDS, evaluate_reports, open_alerts_from_values
        from .followups import on_alert_changed, on_new_finding
        from .gates import released
        from .models import Alert, HealthRule, XidDefinition
        from .seed import ensure_health_defaults
        from .tasks import queue_alertmanager_push, queue_gpu_suspicion
        from .whyhere import firing_alerts

        post_migrate.connect(ensure_health_defaults, sender=self)

        # A new finding that names a GPU makes that GPU suspect (nodes.services), in a task after its commit.
        on_new_finding(queue_gpu_suspicion)
        # Every change of an alert is pushed to Alertmanager (health.alertmanager_push), after its commit.
        on_alert_changed(queue_alertmanager_push)
        # Released after re-validation: the events of before the pass are answered (health.gates).
        followup("release_to_production")(released)
        # The node page's header names the firing alerts (nodes.whyhere; nodes never imports health).
        why_here_fact(firing_alerts)
        # Findings and alerts shown in the node's workload scheduler (health.scheduler_status).
        from schedulers.conditions import problem_view

        from .scheduler_status import report_alert_change, report_new_finding, worst_open_problem

        problem_view(worst_open_problem)
        on_new_finding(report_new_finding)
        on_alert_changed(report_alert_change)
        # A customer's open report of a bad node is answered when the node is back in production.
        from nodes.followups import followup

        from .customer_reports import answer_reports

        for verb in ("release_to_production", "cancel_drain", "force_state"):
            followup(verb)(answer_reports)

        # Telemetry hands every newly stored batch of reports to the rules; the node's firing
        # alerts are read with the node in ingest's one statement (a healthy report: no query).
        firing = NodeRows(Alert, OPEN_ALERT_FIELDS, "state", AlertState.FIRING.value)
        consumes_reports(ReportConsumer(evaluate_reports, firing, open_alerts_from_values))

        # The alert list's bulk bar (nodewarden.bulk's registry).
        from .bulk import register_alert_actions

        register_alert_actions()
        # In-process caches of the hot path: drop them when an operator edits a row.
        for model, invalidate in ((HealthRule, ruleconfig.invalidate_cache), (XidDefinition, xid.invalidate_cache)):
            post_save.connect(lambda *a, _f=invalidate, **k: _f(), sender=model, weak=False)
            post_delete.connect(lambda *a, _f=invalidate, **k: _f(), sender=model, weak=False)
