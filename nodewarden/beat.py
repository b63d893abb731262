"""When a periodic job runs next, read from the Celery beat schedule in settings (CELERY_BEAT_SCHEDULE),
so that a page still empty can say what will fill it and when, and stays true when the schedule changes."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.schedules import BaseSchedule, crontab
from django.conf import settings
from django.utils import timezone


@dataclass(frozen=True)
class NextRun:
    """A beat entry's task, when it runs next (None: not known ahead, e.g. a solar schedule), how often."""

    task: str
    at: datetime | None
    every: timedelta | None


def next_run(task: str, now: datetime | None = None) -> NextRun | None:
    """The soonest next run of ``task`` over the beat entries that run it; None if no entry does
    (the job is not scheduled: the page should say it runs only when asked)."""
    now = now or timezone.now()
    found: list[NextRun] = []
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        if entry.get("task") != task:
            continue
        when = entry.get("schedule")
        if isinstance(when, int | float):
            when = timedelta(seconds=when)
        if isinstance(when, timedelta):
            # The interval counts from beat's last run, which only beat knows: at most one interval away.
            found.append(NextRun(task, now + when, when))
        elif isinstance(when, BaseSchedule):
            # Asked as of ``now`` (a copy with its clock set), as if it had just run: what comes next.
            probe = copy.copy(when)
            probe.nowfun = lambda: now  # type: ignore[attr-defined]  # celery-types calls it "nowfunc"
            wait = probe.remaining_estimate(now)
            found.append(NextRun(task, now + wait, None if isinstance(when, crontab) else wait))
        else:
            found.append(NextRun(task, None, None))
    known = [r for r in found if r.at is not None]
    if known:
        return min(known, key=lambda r: r.at or now)
    return found[0] if found else None
