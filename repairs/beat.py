"""The repairs app's Celery beat entry, merged into nodewarden/celery.py's beat_schedule."""

from __future__ import annotations

BEAT = {
    # Webhook deliveries due for their first try or a retry (repairs.webhooks).
    "send-due-webhooks": {"task": "repairs.tasks.send_due_webhooks", "schedule": 60.0},
}
