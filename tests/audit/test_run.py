"""run_audit: the run recorded, a breach raised as a warning finding with its evidence and cleared
when it is gone; the command's output and exit status; the staff page; /metrics."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditRun
from audit.services import run_audit
from health.choices import AlertState
from health.models import Alert, Finding
from remediation.choices import Rung, Status, Urgency
from remediation.models import Remediation
from tests.factories import NodeFactory, UserFactory

pytestmark = pytest.mark.django_db
AGO = timezone.now() - timedelta(days=2)


def stuck_initializing(settings):
    settings.NODEWARDEN_DAY0_TIMEOUT = 3600
    return NodeFactory(state="initializing", state_changed_at=timezone.now() - timedelta(hours=3))


def test_a_breach_is_recorded_raised_as_a_warning_finding_and_cleared_when_gone(settings):
    node = stuck_initializing(settings)
    run = run_audit(source="test")
    assert run.breach_total == 1 and run.counts["transient_timeout"]["breaches"] == 1
    assert run.breaches[0]["hostname"] == node.hostname and run.raised == 1
    assert run.counts["scheduler_agreement"]["breaches"] == 0 and run.finished is not None
    finding = Finding.objects.get(node=node, rule="audit.transient_timeout")
    assert finding.severity == "warning" and finding.evidence["evidence"][0]["state"] == "initializing"
    assert "Nodewarden believes initializing (transient)" in finding.summary

    again = run_audit(source="test")  # still there: the alert is refreshed, no new finding
    assert (again.breach_total, again.raised) == (1, 0)
    assert Finding.objects.filter(node=node, rule="audit.transient_timeout").count() == 1

    settings.NODEWARDEN_DAY0_TIMEOUT = 24 * 3600  # the breach is gone
    gone = run_audit(source="test")
    assert (gone.breach_total, gone.cleared) == (0, 1)
    assert Alert.objects.get(node=node, rule="audit.transient_timeout").state == AlertState.RESOLVED


def test_an_unknown_answer_never_clears_an_audit_alert(settings):
    node = NodeFactory(state="remediating", state_changed_at=AGO)
    rem = Remediation.objects.create(
        node=node, status=Status.VALIDATING, rung=Rung.REBOOT, urgency=Urgency.NOW, updated=AGO
    )
    assert run_audit().counts["live_remediation"]["breaches"] == 1
    settings.NODEWARDEN_AUDIT_GRACE_SECONDS = 10 * 24 * 3600  # the node is "just changed": not sure this run
    unsure = run_audit()
    assert unsure.counts["live_remediation"]["breaches"] == 0
    assert Alert.objects.get(node=node, rule="audit.live_remediation").state == AlertState.FIRING
    Remediation.objects.filter(pk=rem.pk).update(status=Status.FAILED)
    run_audit()
    assert Alert.objects.get(node=node, rule="audit.live_remediation").state == AlertState.RESOLVED


def test_the_command_prints_breaches_and_exits_non_zero(settings, capsys):
    node = stuck_initializing(settings)
    with pytest.raises(SystemExit) as exit_:
        call_command("audit_fleet")
    out = capsys.readouterr().out
    assert exit_.value.code == 1 and f"BREACH transient_timeout {node.hostname}" in out
    with pytest.raises(SystemExit):
        call_command("audit_fleet", "--json", "--dry-run")
    report = json.loads(capsys.readouterr().out)
    assert report["breach_total"] == 1 and report["breaches"][0]["invariant"] == "transient_timeout"
    assert report["raised"] == 0


def test_the_command_exits_zero_on_a_clean_fleet(capsys):
    NodeFactory(production=True)
    call_command("audit_fleet")
    assert "0 breaches" in capsys.readouterr().out
    assert AuditRun.objects.get().source == "command"


def test_the_page_lists_the_last_run_for_staff_only(client, settings, operator, customer):
    node = stuck_initializing(settings)
    run_audit(source="beat")
    client.force_login(customer)
    assert client.get("/audit/").status_code == 404
    client.force_login(operator)
    page = client.get("/audit/")
    assert page.status_code == 200
    html = page.content.decode()
    assert node.hostname in html and 'data-invariant="transient_timeout"' in html


def test_metrics_count_the_last_runs_breaches_by_invariant(client, settings, operator):
    stuck_initializing(settings)
    run = run_audit()
    client.force_login(operator)
    text = client.get("/metrics").content.decode()
    assert 'nodewarden_audit_breaches{invariant="transient_timeout"} 1.0' in text
    assert 'nodewarden_audit_breaches{invariant="bmc_power"} 0.0' in text
    assert (
        f"nodewarden_audit_last_run_timestamp_seconds {run.finished.timestamp():.9e}"[:60] in text
        or "nodewarden_audit_last_run_timestamp_seconds 1." in text
    )


def test_a_user_without_staff_gets_404_not_login_loop(client):
    client.force_login(UserFactory(username="plain"))
    assert client.get("/audit/").status_code == 404


def test_the_page_before_any_run_says_when_the_audit_runs_next(client, settings, operator):
    from celery.schedules import crontab

    settings.CELERY_BEAT_SCHEDULE = {"audit": {"task": "audit.tasks.audit_fleet", "schedule": crontab(minute="*/15")}}
    client.force_login(operator)
    html = client.get("/audit/").content.decode()
    assert "No audit has run yet" in html and 'id="audit-next-run"' in html
    settings.CELERY_BEAT_SCHEDULE = {}
    html = client.get("/audit/").content.decode()
    assert "once it is in the beat schedule" in html and 'id="audit-next-run"' not in html
