"""Background work of the reports: the hourly roll-up of the fleet's state changes per day."""

from __future__ import annotations

from celery import shared_task

from . import flows


@shared_task(name="reports.tasks.roll_up_flows", ignore_result=True)
def roll_up_flows() -> int:
    """Count the finished days' state changes not rolled up yet (``flows.roll_up``: the lifecycle
    flow of weeks and months reads those). Safe to run twice; returns the rows written."""
    return flows.roll_up()
