"""The beat schedule Celery actually runs (CELERY_BEAT_SCHEDULE in nodewarden/settings.py, read by
nodewarden/celery.py's app): every entry names a task the worker registers, on a queue the worker
listens on, and every periodic task the docs promise is in it at the promised interval."""

from __future__ import annotations

from importlib import import_module
from typing import Any

import pytest
from celery.schedules import crontab
from django.apps import apps
from django.utils.module_loading import module_has_submodule

from nodewarden.celery import QUEUE_NAMES, app

# What the README promises runs periodically (Operations, Remediation, Fleet auditor, Fabric,
# Trends, Repairs): task -> its interval (seconds, or the crontab). Defaults of the environment
# knobs (NODEWARDEN_AUDIT_MINUTES=5, NODEWARDEN_FABRIC_COLLECT_HOURS=4).
PROMISED: dict[str, Any] = {
    "nodes.tasks.snapshot_state_counts": crontab(minute=0),
    "reports.tasks.roll_up_flows": crontab(minute=5),
    "health.tasks.check_heartbeats": 60.0,
    "telemetry.tasks.scrape_dcgm_exporters": 30.0,
    "checks.tasks.expire_stale_checks": 60.0,
    "telemetry.tasks.expire_agent_commands": 60.0,
    "checks.tasks.keep_checks_fresh": 300.0,
    "checks.tasks.preempt_wanted_checks": 10.0,
    "telemetry.tasks.roll_up_and_prune": crontab(minute=7),
    "telemetry.tasks.pack_past_hours": crontab(minute=12),
    "provisioning.tasks.fail_stuck_day0": 300.0,
    "fabric.tasks.collect_fabric": 4 * 3600.0,
    "fabric.tasks.record_agent_counters": 900.0,
    "remediation.tasks.reconcile": 60.0,
    "schedulers.tasks.follow_drains": 60.0,
    "repairs.tasks.send_due_webhooks": 60.0,
    "trends.tasks.evaluate_trends": crontab(hour=3, minute=30),
    "validation.tasks.advance_day1_stages": 15.0,
    "audit.tasks.audit_fleet": 300.0,
    "health.tasks.resend_alerts_to_alertmanager": 60.0,
    "feeds.tasks.deliver_events": 5.0,
    "bmc.tasks.poll_power_states": 60.0,
}


@pytest.fixture(scope="module")
def registered() -> set[str]:
    # What the worker's autodiscovery (app.autodiscover_tasks()) imports: every app's tasks module.
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, "tasks"):
            import_module(f"{config.name}.tasks")
    return set(app.tasks)


def _entries() -> list[tuple[str, dict[str, Any]]]:
    return sorted(app.conf.beat_schedule.items())


@pytest.mark.parametrize(("name", "entry"), _entries())
def test_every_entry_names_a_registered_task(name, entry, registered):
    assert entry["task"] in registered, f"beat entry {name!r} names an unknown task"


@pytest.mark.parametrize(("name", "entry"), _entries())
def test_every_entry_goes_to_a_queue_a_worker_listens_on(name, entry):
    assert entry.get("options", {}).get("queue", "default") in QUEUE_NAMES


@pytest.mark.parametrize(("task", "every"), sorted(PROMISED.items()))
def test_every_promised_periodic_task_is_scheduled(task, every):
    schedules = [entry["schedule"] for entry in app.conf.beat_schedule.values() if entry["task"] == task]
    assert schedules == [every], f"{task} should run once per {every}"


def test_nothing_runs_periodically_that_is_not_promised():
    assert {entry["task"] for entry in app.conf.beat_schedule.values()} == set(PROMISED)
