"""A node that never joins after Day 0 began goes to triage, saying what was seen."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from health.models import Finding
from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from provisioning.models import BootConfig
from provisioning.services import prepare_boot
from provisioning.tasks import fail_stuck_initializing
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def test_a_node_that_never_fetched_its_user_data_goes_to_triage_after_the_timeout(settings):
    settings.NODEWARDEN_DAY0_TIMEOUT = 3600
    node = NodeFactory(state=NodeState.ENROLLED)
    prepare_boot(node.pk, actor=Actor.system("tests"), reason="racked")
    assert fail_stuck_initializing(now=timezone.now() + timedelta(minutes=59)) == 0
    assert fail_stuck_initializing(now=timezone.now() + timedelta(minutes=61)) == 1
    node.refresh_from_db()
    assert node.state == NodeState.TRIAGE
    reason = NodeEvent.objects.get(node=node, transition="fail_validation").reason
    assert "it never fetched its user-data (did it PXE-boot?)" in reason
    assert Finding.objects.get(node=node, rule="day0_timeout").severity == "degraded"
    assert fail_stuck_initializing(now=timezone.now() + timedelta(hours=2)) == 0  # once


def test_the_reason_says_when_the_user_data_was_fetched(settings):
    settings.NODEWARDEN_DAY0_TIMEOUT = 60
    node = NodeFactory(state=NodeState.ENROLLED)
    prepare_boot(node.pk, actor=Actor.system("tests"), reason="racked")
    BootConfig.objects.filter(node=node).update(user_data_fetched_at=timezone.now())
    fail_stuck_initializing(now=timezone.now() + timedelta(minutes=5))
    assert "fetched at" in NodeEvent.objects.get(node=node, transition="fail_validation").reason
