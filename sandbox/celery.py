"""The demo's Celery app: the product's (``nodewarden.celery``) with the demo's tasks and beat entries.

``celery -A sandbox worker`` / ``beat`` (bin/demo). The beat entries exist only while
NODEWARDEN_DEMO_CHURN is true (read at import: export it before the worker and beat start);
each task also checks it, so a stray beat entry does nothing outside the demo.
"""

from __future__ import annotations

import os

# Before nodewarden.celery sets its own default: the demo runs with the sandbox apps installed.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sandbox.settings")

from django.conf import settings

from nodewarden.celery import app

DEMO_BEAT_SCHEDULE = {
    # Keeps the seeded demo fleet moving, through the real services.
    "churn-demo-fleet": {"task": "sandbox.demo.churn_demo_fleet", "schedule": 60.0},
    # ...and its nodes' agents report every 30 s through the real ingest service.
    "report-demo-telemetry": {"task": "sandbox.demo.report_demo_telemetry", "schedule": 30.0},
    # ...and new servers are enrolled, booted, joined and validated through the real Day 0/Day 1 road.
    "bring-up-demo-nodes": {"task": "sandbox.demo.bring_up_demo_nodes", "schedule": 20.0},
    # ...and the slurmd-backed nodes run short customer jobs, so a drain waits for the job to end.
    "submit-demo-jobs": {"task": "sandbox.demo.submit_demo_jobs", "schedule": 60.0},
    # ...and the fleet simulator plants faults at the published rates (sped up) for all of it to handle.
    "keep-demo-fleet-failing": {"task": "sandbox.simulator.live.keep_failing", "schedule": 60.0},
    # ...and the trends the product evaluates once a night, every 15 minutes: a visitor sees them today.
    "evaluate-demo-trends": {"task": "trends.tasks.evaluate_trends", "schedule": 900.0},
}

if settings.NODEWARDEN_DEMO_CHURN:
    app.conf.beat_schedule.update(DEMO_BEAT_SCHEDULE)
    # The demo tasks live outside tasks.py modules: the worker must be told to import them.
    app.conf.include = ["sandbox.demo", "sandbox.simulator.live"]

__all__ = ["app"]
