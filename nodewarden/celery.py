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
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")

app = Celery("nodewarden")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUE_NAMES = ("default", "provisioning", "validation", "remediation")
# Each queue has its own routing key, so a message routed by key lands in one queue only.
app.conf.task_queues = [Queue(name, routing_key=name) for name in QUEUE_NAMES]
# The beat schedule is CELERY_BEAT_SCHEDULE in settings.py: its intervals are settings, and reading
# them here, at import, would run before a settings module that imports this package has finished.
app.autodiscover_tasks()
