"""Issue 13, defects 3 and 6: a resent kernel event counts once; a report from the future is refused.

These run the real ingest and the real health rules (XID catalog and rule rows are seeded
by migrate), on SQLite and, with PG=1, on PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import msgspec
import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from health.models import Alert, Finding, RuleWindow
from telemetry import consumers
from telemetry.ingest import IngestRefused, ingest_reports
from telemetry.models import GpuState, IngestRejection, NodeHealth, NodeReport, XidRecord
from telemetry.schema import AgentReport
from telemetry.testing import make_report, make_xid

from .conftest import race_an_open_transaction

BOOT = "7c1f3b5e-0a55-4b55-9a8e-1f0d1e6a2b3c"
OTHER_BOOT = "d2a7c9e1-3f40-4c8b-b1a6-5e0f9c3d2a11"


def agent_report(node, at, *, events=(), boot_id: str | None = BOOT, seq: int = 0) -> AgentReport:
    data = make_report(node.hostname, collected_at=at, seq=seq, seed=seq)
    data["report_id"] = f"{node.hostname}-{seq}-{at.timestamp():.6f}"
    data["xid_events"] = list(events)
    if boot_id is not None:
        data["boot_id"] = boot_id
    return msgspec.convert(data, AgentReport)


def rma_findings(node) -> int:
    return Finding.objects.filter(node=node, rule="xid_repeated").count()


def xid_79_count(node) -> int:
    window = RuleWindow.objects.filter(node=node, rule="xid_repeated", subject__endswith="|xid:79").first()
    return len(window.events) if window else 0


@pytest.mark.django_db
class TestAResentKernelEventCountsOnce:
    def test_an_agent_restart_resending_an_xid_79_in_a_new_report_is_one_finding_and_no_rma(self, node):
        now = timezone.now().replace(microsecond=0)
        # The agent spooled a report with the XID, then crashed before saving its kmsg cursor.
        line = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=40), kmsg_seq=1201)
        ingest_reports(node.pk, [agent_report(node, now - timedelta(seconds=30), events=[line], seq=1)])
        # Restarted, it reads the record again: same boot, same kernel seq, a new report (new id,
        # new seq) and a wall-clock time a few ms off (the boot time is recomputed at start-up).
        again = dict(line, observed_at=(now - timedelta(seconds=40, milliseconds=-3)).isoformat())
        result = ingest_reports(node.pk, [agent_report(node, now, events=[again], seq=2)])

        assert result.accepted == 1  # the report itself is new
        assert XidRecord.objects.filter(node=node).count() == 1
        assert Finding.objects.filter(node=node, rule="xid").count() == 1
        assert Alert.objects.get(node=node, rule="xid").occurrences == 1
        assert xid_79_count(node) == 1, "no '2 XID 79 in 168 h'"
        assert rma_findings(node) == 0

    def test_the_two_reports_flushed_together_from_the_spool_count_the_event_once(self, node):
        now = timezone.now().replace(microsecond=0)
        line = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=40), kmsg_seq=1201)
        again = dict(line, observed_at=(now - timedelta(seconds=40, milliseconds=-2)).isoformat())
        ingest_reports(
            node.pk,
            [
                agent_report(node, now - timedelta(seconds=30), events=[line], seq=1),
                agent_report(node, now, events=[again], seq=2),
            ],
        )
        assert XidRecord.objects.filter(node=node).count() == 1
        assert Finding.objects.filter(node=node, rule="xid").count() == 1
        assert xid_79_count(node) == 1 and rma_findings(node) == 0

    def test_the_same_kernel_seq_in_another_boot_is_another_event_and_two_xid_79_mean_rma(self, node):
        now = timezone.now().replace(microsecond=0)
        first = make_xid(79, gpu=3, observed_at=now - timedelta(hours=5), kmsg_seq=1201)
        ingest_reports(node.pk, [agent_report(node, now - timedelta(hours=5), events=[first], seq=1)])
        # After the reboot the kernel numbers its records from 0 again: seq 1201 is a new record.
        second = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=10), kmsg_seq=1201)
        ingest_reports(node.pk, [agent_report(node, now, events=[second], boot_id=OTHER_BOOT, seq=2)])
        assert XidRecord.objects.filter(node=node).count() == 2
        assert Finding.objects.filter(node=node, rule="xid").count() == 2
        assert xid_79_count(node) == 2 and rma_findings(node) == 1

    def test_a_journal_line_without_a_kernel_seq_resent_is_stored_and_counted_once(self, node):
        now = timezone.now().replace(microsecond=0)
        line = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=40))  # journalctl: no kmsg seq
        ingest_reports(node.pk, [agent_report(node, now - timedelta(seconds=30), events=[line], boot_id=None, seq=1)])
        ingest_reports(node.pk, [agent_report(node, now, events=[line], boot_id=None, seq=2)])
        assert XidRecord.objects.filter(node=node).count() == 1
        assert Finding.objects.filter(node=node, rule="xid").count() == 1
        assert rma_findings(node) == 0

    def test_only_the_new_events_of_a_report_reach_the_rules(self, node, monkeypatch):
        now = timezone.now().replace(microsecond=0)
        old = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=40), kmsg_seq=1201)
        ingest_reports(node.pk, [agent_report(node, now - timedelta(seconds=30), events=[old], seq=1)])
        seen: list = []
        monkeypatch.setattr(
            consumers, "CONSUMER", replace(consumers.CONSUMER, evaluate=lambda contexts, **_: seen.extend(contexts))
        )
        new = make_xid(48, gpu=1, observed_at=now - timedelta(seconds=5), kmsg_seq=1230)
        ingest_reports(node.pk, [agent_report(node, now, events=[old, new], seq=2)])
        (context,) = seen
        assert [(e.xid, e.kmsg_seq) for e in context.report.xid_events] == [(48, 1230)]
        assert XidRecord.objects.filter(node=node).count() == 2


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_two_concurrent_requests_with_the_same_event_count_it_once(node):
    """Two requests (two connections) carry the same XID: the second waits on the first's
    identity row and then finds it stored; only one of them raises a finding."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent transactions need PostgreSQL (SQLite serialises writers)")
    now = timezone.now().replace(microsecond=0)
    line = make_xid(79, gpu=3, observed_at=now - timedelta(seconds=40), kmsg_seq=1201)
    first = [agent_report(node, now - timedelta(seconds=30), events=[line], seq=1)]
    second = [
        agent_report(node, now, events=[dict(line, observed_at=(now - timedelta(seconds=39)).isoformat())], seq=2)
    ]
    errors = race_an_open_transaction(
        lambda: ingest_reports(node.pk, first),
        lambda: ingest_reports(node.pk, second),
        "the second request must wait for the first one's identity row",
    )
    assert not errors, errors
    assert XidRecord.objects.filter(node=node).count() == 1
    assert Finding.objects.filter(node=node, rule="xid").count() == 1
    assert rma_findings(node) == 0


@pytest.mark.django_db
class TestAReportFromTheFuture:
    def test_a_report_dated_2999_is_refused_naming_the_field_and_the_limit(self, agent, node):
        now = timezone.now().replace(microsecond=0)
        good = make_report(node.hostname, collected_at=now)
        future = make_report(node.hostname, collected_at=now.replace(year=2999), seed=1)
        response = agent.post({"reports": [good, future]})
        assert response.status_code == 400
        detail = response.json()["detail"]
        assert "$.reports[1].collected_at" in detail and "300 s" in detail
        assert NodeReport.objects.count() == 0 and not NodeHealth.objects.exists()
        assert IngestRejection.objects.get().status == 400
        # The agent resends the batch one report at a time on a 400: the good one goes in.
        assert agent.post({"reports": [good]}).status_code == 200
        assert NodeHealth.objects.get(node=node).last_report_at == now

    def test_an_xid_event_from_the_future_is_refused_naming_it(self, agent, node):
        now = timezone.now().replace(microsecond=0)
        report = make_report(node.hostname, collected_at=now)
        report["xid_events"] = [make_xid(79, gpu=3, observed_at=now + timedelta(days=3), kmsg_seq=5)]
        response = agent.post({"reports": [report]})
        assert response.status_code == 400
        assert "$.reports[0].xid_events[0].observed_at" in response.json()["detail"]
        assert not XidRecord.objects.exists() and not Finding.objects.exists()

    def test_a_clock_a_little_ahead_is_within_the_allowance(self, agent, node):
        ahead = timezone.now() + timedelta(seconds=120)
        assert agent.post({"reports": [make_report(node.hostname, collected_at=ahead)]}).status_code == 200

    @override_settings(NODEWARDEN_REPORT_MAX_FUTURE_SECONDS=30)
    def test_the_allowance_is_a_setting(self, agent, node):
        ahead = timezone.now() + timedelta(seconds=120)
        response = agent.post({"reports": [make_report(node.hostname, collected_at=ahead)]})
        assert response.status_code == 400 and "30 s" in response.json()["detail"]

    @pytest.mark.parametrize("offset", ["+16:00", "-16:00", "+23:59"])
    def test_a_utc_offset_no_clock_has_is_a_400_not_a_500(self, agent, node, offset):
        report = make_report(node.hostname, collected_at=timezone.now() - timedelta(days=1))
        report["collected_at"] = report["collected_at"][:19] + offset
        response = agent.post({"reports": [report]})
        assert response.status_code == 400
        detail = response.json()["detail"]
        assert "$.reports[0].collected_at" in detail and "15:59" in detail
        assert not NodeReport.objects.exists()

    def test_an_xid_with_an_impossible_utc_offset_is_a_400(self, agent, node):
        now = timezone.now().replace(microsecond=0)
        report = make_report(node.hostname, collected_at=now)
        report["xid_events"] = [make_xid(79, gpu=3, observed_at=now - timedelta(days=1), kmsg_seq=5)]
        report["xid_events"][0]["observed_at"] = report["xid_events"][0]["observed_at"][:19] + "-20:00"
        response = agent.post({"reports": [report]})
        assert response.status_code == 400
        assert "$.reports[0].xid_events[0].observed_at" in response.json()["detail"]

    @pytest.mark.parametrize("with_history", [False, True])
    def test_a_future_dated_latest_state_stored_before_does_not_pin_the_node(self, node, with_history):
        start = timezone.now() - timedelta(minutes=1)
        if with_history:
            ingest_reports(node.pk, [agent_report(node, start, seq=1)])
        # A row from before the door was shut (or from a portal clock that stepped back).
        with override_settings(NODEWARDEN_REPORT_MAX_FUTURE_SECONDS=10**11):
            ingest_reports(node.pk, [agent_report(node, start.replace(year=2999), seq=2)])
        assert NodeHealth.objects.get(node=node).last_report_at.year == 2999

        now = timezone.now()  # the agent's next report
        fresh = agent_report(node, now, seq=3)
        ingest_reports(node.pk, [fresh])

        health = NodeHealth.objects.get(node=node)
        assert health.last_report_at == now
        assert health.host["uptime_s"] == fresh.host.uptime_s
        assert set(GpuState.objects.filter(node=node).values_list("updated_at", flat=True)) == {now}
        assert GpuState.objects.get(node=node, index=0).temperature_c == fresh.gpus[0].temperature_c

    def test_ingest_refuses_a_future_report_whoever_calls_it(self, node):
        with pytest.raises(IngestRefused, match=r"collected_at"):
            ingest_reports(node.pk, [agent_report(node, timezone.now() + timedelta(hours=1))])
        assert not NodeReport.objects.exists()
