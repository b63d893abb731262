"""Periodic work of the checks app."""

from __future__ import annotations

from celery import shared_task

from . import freshness, services


@shared_task
def expire_stale_checks() -> int:
    """Mark claimed active checks past their deadline as errors (the agent died or lost the run).

    Idempotent and safe to overlap: each run is expired with a compare-and-swap update.
    """
    return services.expire_stale_checks()


@shared_task
def preempt_wanted_checks() -> int:
    """Abort held active checks on nodes their workload scheduler wants back (a job is pending).

    Bounded (``services.PREEMPT_BATCH`` nodes, one scheduler question each) and safe to overlap:
    each run is preempted with a compare-and-swap update, a second sweep finds it no longer running.
    """
    return services.preempt_wanted_checks()


@shared_task
def keep_checks_fresh() -> int:
    """Request the stalest due active check on idle production nodes, per cluster (``checks.freshness``).

    Idempotent and bounded: a node with an open check gets nothing new, at most
    ``NODEWARDEN_FRESHNESS_SHARE`` of a cluster's idle nodes are under test, and each cluster's
    scheduler is asked about at most ``freshness.PROBE_BATCH`` nodes per run.
    """
    return freshness.keep_checks_fresh()
