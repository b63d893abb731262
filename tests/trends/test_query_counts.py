"""evaluate_trends reads the fleet in batches: its query count does not grow with the number of
nodes (10 vs 100 nodes with the same planted problems), only with the flags it opens or clears."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from trends import services
from trends.models import TrendFlag

from .conftest import NOW, plant

pytestmark = pytest.mark.django_db


class Rollback(Exception):
    pass


def queries_for(count: int) -> tuple[int, int, int]:
    """(first run, second run) query counts over a planted fleet of ``count`` nodes, and the flags
    opened; everything is rolled back afterwards so the next fleet starts from nothing."""
    try:
        with transaction.atomic():
            plant(count, prefix=f"q{count}")
            with CaptureQueriesContext(connection) as first:
                services.evaluate(now=NOW)
            with CaptureQueriesContext(connection) as second:
                services.evaluate(now=NOW)
            flags = TrendFlag.objects.count()
            raise Rollback
    except Rollback:
        pass
    return len(first), len(second), flags


def test_evaluate_trends_queries_do_not_grow_with_the_fleet():
    small, large = queries_for(10), queries_for(100)
    assert small[2] == large[2] == 4  # the same planted problems in both fleets
    assert small == large
    # Opening four flags (each a flag, a finding, an alert and a history row) is most of it.
    assert small[1] <= 20


def test_the_task_runs_the_evaluation(fleet, time_machine):
    from trends.tasks import evaluate_trends

    time_machine.move_to(NOW)
    result = evaluate_trends.apply().get()
    assert result["nodes"] == 50 and result["opened"] == 4
