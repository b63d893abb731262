"""The Celery application: one app, separate queues per kind of work.

Queues:
- ``provisioning``: Day 0 work (boot, network, cloud-init).
- ``validation``: Day 1 stages and re-validation.
- ``remediation``: Day 2 actions (drain, reboot, power cycle, RMA).
- ``default``: housekeeping (snapshots, clean-ups).

A worker for the demo listens on all of them; a production deployment runs one
worker pool per queue so that a burst of burn-ins never delays a reboot.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")

app = Celery("nodewarden")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUE_NAMES = ("default", "provisioning", "validation", "remediation")
# Each queue has its own routing key, so a message routed by key lands in one queue only.
app.conf.task_queues = [Queue(name, routing_key=name) for name in QUEUE_NAMES]
app.conf.beat_schedule = {
    "snapshot-state-counts": {
        "task": "nodes.tasks.snapshot_state_counts",
        "schedule": crontab(minute=0),
    },
    # The lifecycle flow's daily roll-up of state changes (the Sankey reads whole days from it).
    "roll-up-flows": {"task": "reports.tasks.roll_up_flows", "schedule": crontab(minute=5)},
    # A node that stops reporting is a finding of its own (health rule "heartbeat_missing").
    "check-heartbeats": {"task": "health.tasks.check_heartbeats", "schedule": 60.0},
    # Pull dcgm-exporter endpoints that operators registered (telemetry.DcgmExporterTarget).
    "scrape-dcgm-exporters": {"task": "telemetry.tasks.scrape_dcgm_exporters", "schedule": 30.0},
    # A check claimed by an agent that never reported back becomes an error after its deadline.
    "expire-stale-checks": {"task": "checks.tasks.expire_stale_checks", "schedule": 60.0},
    # Raw samples older than TELEMETRY_RAW_RETENTION_DAYS become hourly roll-ups.
    "roll-up-telemetry": {"task": "telemetry.tasks.roll_up_and_prune", "schedule": crontab(minute=7)},
    # Day 0: a node that never joins after its PXE boot goes to triage (NODEWARDEN_DAY0_TIMEOUT).
    "fail-stuck-day0": {
        "task": "provisioning.tasks.fail_stuck_day0",
        "schedule": 300.0,
        "options": {"queue": "provisioning"},
    },
    # InfiniBand: the fabric against the cabling plan several times a day (a no-op unless
    # NODEWARDEN_FABRIC_COLLECT), and the agents' HCA counters every 15 minutes.
    "collect-fabric": {
        "task": "fabric.tasks.collect_fabric",
        "schedule": 3600.0 * float(os.environ.get("NODEWARDEN_FABRIC_COLLECT_HOURS", "4")),
    },
    "record-agent-ib-counters": {"task": "fabric.tasks.record_agent_counters", "schedule": 900.0},
    # Remediation: re-drive stalled steps, finished drains and queued plans.
    "reconcile-remediations": {
        "task": "remediation.tasks.reconcile",
        "schedule": 60.0,
        "options": {"queue": "remediation"},
    },
    # What transitions owe the workload schedulers (retried), and drains moved on as they report.
    "follow-drains": {"task": "schedulers.tasks.follow_drains", "schedule": 60.0, "options": {"queue": "remediation"}},
    # Repair tickets and RMA cases: outgoing webhook deliveries that are due (retries with back-off).
    "send-due-webhooks": {"task": "repairs.tasks.send_due_webhooks", "schedule": 60.0},
    # Trends: degrading figures, peer underperformers and lemon nodes, once a day.
    "evaluate-trends": {"task": "trends.tasks.evaluate_trends", "schedule": crontab(hour=3, minute=30)},
    # Day 1: poll open stages (burn-in checks, soak, waiting for the agent) and fail stuck ones.
    "advance-day1-stages": {
        "task": "validation.tasks.advance_day1_stages",
        "schedule": 15.0,
        "options": {"queue": "validation"},
    },
    # The fleet auditor: what Nodewarden believes against schedulers, BMCs and the clock.
    "audit-fleet": {
        "task": "audit.tasks.audit_fleet",
        "schedule": 60.0 * float(os.environ.get("NODEWARDEN_AUDIT_MINUTES", "5")),
    },
}
app.autodiscover_tasks()
