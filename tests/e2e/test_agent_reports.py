"""The issue's "Done when", end to end: the real node agent reports to the real portal over HTTP.

The portal is pytest-django's live server (this checkout's Django, URLs, views and
database); the agent is the real package with its collectors, urllib client and on-disk
spool. Only hardware that cannot exist here is simulated (see conftest.SimulatedNode):
NVML answers come from FakeNvml, the kernel log is a file of /dev/kmsg records, and
InfiniBand sysfs, /proc and EDAC are small folders with the kernel's formats.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone

from health.choices import AlertState, RecommendedAction, Severity
from health.models import Alert, Finding
from health.tasks import check_heartbeats
from nodes.choices import EventKind
from nodes.models import NodeEvent, Run
from nodewarden_agent.client import PortalAuthError, PortalClient
from telemetry.models import GpuSample, GpuState, IngestRejection, NodeHealth, NodeReport, XidRecord
from tests.factories import NodeFactory

from .conftest import AGENT_SRC, XID_79_LINE, XID_GPU, Portal, spooled

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_healthy_h100_report_becomes_node_and_gpu_state_and_history_and_no_finding(
    live_server, node, agent_token, hardware
):
    agent = hardware.agent(live_server.url, agent_token)

    agent.cycle()
    agent.cycle()

    assert len(agent.spool) == 0, "the portal accepted both reports"
    health = NodeHealth.objects.get(node=node)
    assert (health.source, health.gpu_count, health.gpu_compute_processes) == ("agent", 8, 0)
    assert (health.driver_version, health.cuda_version) == ("550.90.07", "12.4")
    assert health.collector_errors == {}
    assert [p["state"] for p in health.ib_ports] == ["ACTIVE"] * 8
    gpus = list(GpuState.objects.filter(node=node).order_by("index"))
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].uuid == "GPU-22dbdd79-f55a-92a8-aa39-322198e72ed6"
    assert (gpus[0].temperature_c, gpus[0].power_w, gpus[0].power_limit_w) == (25, 69.123, 700.0)
    assert gpus[XID_GPU].pci_bus_id == "00000000:53:00.0"
    assert [r.seq for r in NodeReport.objects.filter(node=node).order_by("collected_at")] == [1, 2]
    assert GpuSample.objects.filter(node=node).count() == 16
    assert list(Finding.objects.values_list("rule", flat=True)) == []
    assert not Alert.objects.exists()
    assert not IngestRejection.objects.exists()


def test_xid_79_in_the_kernel_log_raises_a_catastrophic_finding_on_the_gpu_at_that_bus(
    live_server, node, agent_token, hardware, operator
):
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()  # healthy: the portal learns which GPU sits at 0000:53:00
    hardware.kernel_log(XID_79_LINE)
    hardware.lose_gpu(XID_GPU)

    agent.cycle()

    finding = Finding.objects.get(node=node, rule="xid")
    assert (finding.xid, finding.gpu_index, finding.source) == (79, XID_GPU, "agent")
    assert (finding.severity, finding.recommended_action) == (Severity.CATASTROPHIC, RecommendedAction.REBOOT)
    assert finding.evidence["raw"] == XID_79_LINE
    assert finding.alert.state == AlertState.FIRING and finding.alert.gpu_index == XID_GPU
    event = NodeEvent.objects.get(pk=finding.event_id)
    assert (event.node_id, event.kind, event.details["xid"]) == (node.pk, EventKind.FINDING, 79)
    assert "XID 79" in event.reason and "Reboot" in event.reason
    assert XidRecord.objects.get(node=node).gpu_index == XID_GPU
    assert GpuState.objects.get(node=node, index=XID_GPU).updated_at < NodeHealth.objects.get(node=node).last_report_at
    assert Finding.objects.get(node=node, rule="gpu_missing").severity == Severity.CATASTROPHIC

    portal = Portal(live_server.url, operator)
    status, partial = portal.get(f"/nodes/{node.pk}/alerts/", page=True)
    assert status == 200
    assert "XID 79" in partial and f"GPU {XID_GPU}" in partial and "Reboot" in partial
    status, page = portal.get(f"/api/findings/?node={node.pk}&xid=79")
    assert status == 200 and page["count"] == 1
    listed = page["results"][0]
    assert (listed["severity"], listed["gpu_index"], listed["recommended_action"]) == ("catastrophic", 3, "reboot")

    agent.cycle()  # the kernel-log cursor moved on: the same line is not reported twice
    assert Finding.objects.filter(node=node, rule="xid").count() == 1


def test_an_xid_line_user_space_writes_to_the_kernel_log_is_no_event(live_server, node, agent_token, hardware):
    """A script echoing an Xid line into /dev/kmsg gets facility LOG_USER (priority 12 = user.warning)."""
    agent = hardware.agent(live_server.url, agent_token)
    hardware.kernel_log(XID_79_LINE, priority=12)
    hardware.kernel_log(f"xid-drill[4242]: {XID_79_LINE}", priority=14)
    hardware.kernel_log("NVRM: Xid (PCI:0000:53:00 GPU-I:05): 43, pid=18231, name=python3, Ch 00000008")

    agent.cycle()

    assert len(agent.spool) == 0
    assert list(XidRecord.objects.filter(node=node).values_list("xid", "gpu_index")) == [(43, XID_GPU)]
    [finding] = Finding.objects.filter(node=node)
    assert (finding.xid, finding.severity, finding.recommended_action) == (43, Severity.INFO, RecommendedAction.NONE)


def test_reports_spooled_while_the_portal_is_down_arrive_in_order_after_a_restart(
    live_server, node, agent_token, hardware, refused_url
):
    down = hardware.agent(refused_url, agent_token)
    for cycle in range(5):
        if cycle == 2:
            hardware.kernel_log(XID_79_LINE)  # happens during the outage, lands in report 3
        down.cycle()
    waiting = spooled(down)
    assert [r["seq"] for r in waiting] == [1, 2, 3, 4, 5]
    assert [len(r.get("xid_events", [])) for r in waiting] == [0, 0, 1, 0, 0]
    assert not NodeReport.objects.exists()

    restarted = hardware.agent(live_server.url, agent_token, batch_size=2)  # a new process, same state folder
    restarted.cycle()

    assert len(restarted.spool) == 0
    stored = list(NodeReport.objects.filter(node=node).order_by("collected_at"))
    assert [r.seq for r in stored] == [1, 2, 3, 4, 5, 6]
    assert [r.report_id for r in stored][:5] == [r["report_id"] for r in waiting]
    received = [r.received_at for r in stored]
    assert received == sorted(received), "sent oldest first, batch after batch"
    assert GpuSample.objects.filter(node=node).count() == 6 * 8
    xid = Finding.objects.get(node=node, rule="xid")  # read once: the restart resumed after the line
    assert (xid.xid, xid.gpu_index) == (79, XID_GPU)

    answer = PortalClient(live_server.url, agent_token).post_reports(waiting[:2])  # a batch resent after a timeout

    assert answer == {"accepted": 0, "duplicates": 2}
    assert NodeReport.objects.filter(node=node).count() == 6
    assert GpuSample.objects.filter(node=node).count() == 6 * 8
    assert Finding.objects.filter(node=node, rule="xid").count() == 1


def test_an_xid_79_resent_by_an_agent_restarted_before_it_saved_its_cursor_is_one_finding_not_rma(
    live_server, node, agent_token, hardware, monkeypatch
):
    """Issue 13, defect 3: the agent spools and sends a report with an XID 79, then dies before
    its kmsg cursor is saved; restarted, it reads the record again into a new report."""
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()  # healthy: the portal learns which GPU sits at 0000:53:00
    hardware.kernel_log(XID_79_LINE)
    kmsg = next(c for c in agent.collectors if c.name == "kmsg")
    monkeypatch.setattr(kmsg, "commit", lambda: None)  # killed between spooling and saving the cursor
    agent.collect()
    agent.flush()
    assert Finding.objects.filter(node=node, rule="xid").count() == 1
    hardware.boot_time += 0.004  # the new process computes the boot's wall-clock time again

    restarted = hardware.agent(live_server.url, agent_token)
    restarted.cycle()

    assert len(restarted.spool) == 0
    first, second = NodeReport.objects.filter(node=node, xid_count=1).order_by("collected_at")
    assert first.report_id != second.report_id and first.seq < second.seq, "the event came back in a new report"
    assert XidRecord.objects.filter(node=node).count() == 1
    assert Finding.objects.filter(node=node, rule="xid").count() == 1
    assert not Finding.objects.filter(node=node, rule="xid_repeated").exists(), "no '2 XID 79 in 168 h -> RMA'"
    assert Alert.objects.get(node=node, rule="xid").occurrences == 1


def test_a_spooled_report_from_a_clock_in_2999_is_set_aside_and_the_others_go_in(
    live_server, node, agent_token, hardware, refused_url
):
    """Issue 13, defect 6: the portal refuses the report (400 naming the field); the agent
    resends its batch report by report, sets that one aside, and the node's state moves on."""
    down = hardware.agent(refused_url, agent_token)
    for _ in range(3):
        down.cycle()
    path, bad = down.spool.peek(10)[1]
    bad["collected_at"] = "2999-01-01T00:00:00+00:00"
    path.write_text(json.dumps(bad))

    restarted = hardware.agent(live_server.url, agent_token)
    restarted.cycle()

    assert len(restarted.spool) == 0
    assert [r.seq for r in NodeReport.objects.filter(node=node).order_by("collected_at")] == [1, 3, 4]
    assert NodeHealth.objects.get(node=node).last_report_at.year == timezone.now().year
    # The batch's refusal (the report at $.reports[1]) and then the report's own.
    batch, alone = IngestRejection.objects.filter(node=node).order_by("received_at")
    assert (batch.status, alone.status) == (400, 400)
    assert "$.reports[1].collected_at" in batch.reason and "$.reports[0].collected_at" in alone.reason
    assert "2999" in alone.reason and "300 s" in alone.reason
    assert len(list(restarted.spool.rejected_dir.iterdir())) >= 1


def test_a_token_used_for_another_node_is_refused_and_the_agent_keeps_the_report(
    live_server, node, agent_token, hardware
):
    other = NodeFactory(hostname="gpu-e2e-02.dc1.example.com", production=True)
    agent = hardware.agent(live_server.url, agent_token, hostname=other.hostname)

    agent.cycle()

    assert len(agent.spool) == 1 and agent.backoff.failures == 1, "kept for a retry, not dropped"
    assert not (hardware.state_dir / "spool" / "rejected").exists()
    with pytest.raises(PortalAuthError) as refused:
        PortalClient(live_server.url, agent_token).post_reports(spooled(agent))
    assert refused.value.status == 403
    assert refused.value.body["error"] == "wrong node"
    assert not NodeReport.objects.exists() and not NodeHealth.objects.exists()
    assert not GpuSample.objects.exists() and not Finding.objects.exists()
    rejection = IngestRejection.objects.filter(status=403).first()
    assert rejection is not None and rejection.node_id == node.pk


def test_an_operator_requested_dcgm_diag_runs_on_the_idle_node_and_comes_back_not_available(
    live_server, node, agent_token, hardware, operator
):
    portal = Portal(live_server.url, operator)
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()  # the node reports 0 compute processes: idle
    status, run = portal.post(
        f"/api/nodes/{node.pk}/checks/", {"kind": "dcgm_diag", "params": {"level": 1}, "reason": "burn-in after RMA"}
    )
    assert status == 201 and run["status"] == "queued", run

    agent.poll_checks(wait=True)

    status, done = portal.get(f"/api/checks/{run['id']}/")
    assert status == 200
    assert done["status"] == "not_available"
    assert done["summary"] == "dcgmi is not installed on this node (install DCGM to run diagnostics)"
    assert done["started"] and done["finished"] and done["claimed_at"]
    assert not list((hardware.state_dir / "check-results").glob("*.json")), "the result left the agent's disk"
    assert Run.objects.get(pk=run["id"]).status == "not_available"
    assert not Finding.objects.exists() and not Alert.objects.exists()
    outcome = NodeEvent.objects.get(node=node, kind=EventKind.ACTION, details__check_status="not_available")
    assert outcome.actor_name == f"system:agent:{node.hostname}"


def _console_script() -> Path | None:
    script = Path(sys.executable).parent / "nodewarden-agent"
    return script if script.exists() else None


def test_the_console_script_on_a_machine_without_nvml_reports_and_raises_nvml_unavailable(
    live_server, node, agent_token, tmp_path
):
    """The installed ``nodewarden-agent once``, as a separate process with the real collectors:
    this test machine has no NVIDIA driver, which is exactly the condition under test."""
    script = _console_script()
    if script is None:
        pytest.skip(f"nodewarden-agent console script not installed next to {sys.executable}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWARDEN_")}
    env.update(
        NODEWARDEN_URL=live_server.url,
        NODEWARDEN_TOKEN=agent_token,
        NODEWARDEN_STATE_DIR=str(tmp_path),
        NODEWARDEN_HOSTNAME=node.hostname,
        NODEWARDEN_REQUEST_TIMEOUT="10",
        PYTHONPATH=str(AGENT_SRC),
    )  # this checkout's agent, whatever the venv's install points at

    done = subprocess.run([str(script), "once"], check=False, env=env, capture_output=True, text=True, timeout=120)

    assert (done.returncode, done.stdout.strip()) == (0, "report sent"), done.stderr
    health = NodeHealth.objects.get(node=node)
    assert "nvml" in health.collector_errors and health.gpu_count == 0
    finding = Finding.objects.get(node=node, rule="nvml_unavailable")
    assert (finding.severity, finding.recommended_action) == (Severity.CATASTROPHIC, RecommendedAction.REBOOT)
    assert finding.summary.startswith("NVML unavailable: ")
    assert finding.alert.state == AlertState.FIRING


def test_a_node_that_goes_silent_raises_heartbeat_missing_and_its_next_report_resolves_it(
    live_server, node, agent_token, hardware
):
    """The beat task runs in the test (its Celery task function); time moves with time-machine, for
    the live server thread too, so the agent's next report really is ten minutes later."""
    agent = hardware.agent(live_server.url, agent_token)
    agent.cycle()
    assert check_heartbeats()["raised"] == 0, "a fresh report: nothing is missing"

    with time_machine.travel(timezone.now() + timedelta(minutes=10), tick=True):
        assert check_heartbeats()["raised"] == 1
        alert = Alert.objects.get(node=node, rule="heartbeat_missing")
        assert (alert.state, alert.severity) == (AlertState.FIRING, Severity(alert.last_finding.severity))
        assert alert.last_finding.summary.startswith("No report for 10 min")

        agent.cycle()

    alert.refresh_from_db()
    assert (alert.state, alert.resolved_reason) == (AlertState.RESOLVED, "a report arrived")
    assert NodeEvent.objects.filter(node=node, kind=EventKind.NOTE, details__alert_id=alert.pk).exists()
