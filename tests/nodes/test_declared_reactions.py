"""What a change causes is declared in one place (nodes.followups, health.followups,
provisioning.rejoin, telemetry.consumers), filled by the upper apps at start-up; no signal
handler performs a step of the domain."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save

from health.followups import ON_ALERT_CHANGE, ON_NEW_FINDING
from health.models import Alert, Finding
from nodes.followups import EVEN_IF_MOVED_ON, FOLLOWUPS, ON_CLUSTER_CHANGE, ON_STATE_CHANGE
from nodes.models import Node, NodeEvent, Run
from provisioning.rejoin import FINDERS
from remediation.models import Remediation


def names(handlers):
    return [f"{fn.__module__}.{fn.__name__}" for fn in handlers]


def test_no_signal_receiver_acts_on_the_domains_records():
    for model in (Node, NodeEvent, Run, Finding, Alert, Remediation):
        assert not post_save.has_listeners(model), model
        assert not post_delete.has_listeners(model), model


def test_a_state_change_queues_its_reaction_and_keeps_the_reports_rows_in_step_in_its_transaction():
    assert names(ON_STATE_CHANGE) == [
        "schedulers.reactions.queue_reaction",  # the scheduler reaction, queued with the transition
        "remediation.safety.note_state_change",  # a batch's safety rails count it (remediation.safety.Rails)
        "reports.followups.rebuild_node_outages",
        "reports.followups.forget_rolled_up_days",
    ]
    assert names(ON_CLUSTER_CHANGE) == ["reports.followups.follow_node_cluster"]


def test_a_new_finding_marks_its_gpu_suspect_and_is_considered_by_remediation_after_commit():
    assert names(ON_NEW_FINDING) == [
        "health.tasks.queue_gpu_suspicion",  # the GPU named becomes suspect, in a task
        "health.scheduler_status.report_new_finding",  # a Kubernetes Event and the node's condition
        "remediation.followups.queue_consideration",
    ]


def test_every_change_of_an_alert_is_pushed_to_alertmanager_after_commit():
    assert names(ON_ALERT_CHANGE) == [
        "health.tasks.queue_alertmanager_push",
        "health.scheduler_status.report_alert_change",  # the Kubernetes node's condition follows its alerts
    ]


def test_a_reimaged_nodes_join_is_awaited_by_remediation():
    assert names(FINDERS) == ["remediation.followups.running_reimage"]


def test_remediation_moves_on_with_the_lifecycle_after_commit():
    registered = {name: names(handlers) for name, handlers in FOLLOWUPS.items()}
    assert registered["complete_drain"][-1:] == ["remediation.followups.rung_after_drain"]
    assert "remediation.followups.remediation_done" in registered["release_to_production"]
    assert "remediation.followups.climb_after_failed_validation" in registered["fail_validation"]
    assert all(handlers for handlers in EVEN_IF_MOVED_ON.values())


def test_every_transition_shows_the_nodes_health_in_its_scheduler_and_a_return_answers_customer_reports():
    for verb, handlers in EVEN_IF_MOVED_ON.items():
        assert names(handlers) == ["schedulers.reactions.react", "schedulers.reactions.report_transition"], verb
    registered = {name: names(handlers) for name, handlers in FOLLOWUPS.items()}
    for verb in ("release_to_production", "cancel_drain", "force_state"):
        assert "health.customer_reports.answer_reports" in registered[verb]
