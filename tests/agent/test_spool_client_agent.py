"""The on-disk spool, the portal client against a real local HTTP server, and the loop:
ordered delivery after an outage, rejected reports set aside, nothing lost on restart."""

from __future__ import annotations

import pytest

from nodewarden_agent.agent import Agent
from nodewarden_agent.client import Backoff, PortalAuthError, PortalClient, PortalRejected, PortalUnavailable
from nodewarden_agent.collectors.infiniband import InfinibandCollector
from nodewarden_agent.config import Config
from nodewarden_agent.spool import Spool

from .conftest import TOKEN


def _report(seq):
    return {
        "report_id": f"r{seq:08d}",
        "hostname": "gpu-node-01",
        "collected_at": "2026-01-01T00:00:00+00:00",
        "seq": seq,
    }


def test_spool_returns_reports_oldest_first_and_survives_a_restart(tmp_path):
    spool = Spool(tmp_path / "spool")
    for seq in (3, 1, 2):
        spool.append(_report(seq))
    reopened = Spool(tmp_path / "spool")
    assert [r["seq"] for _, r in reopened.peek(10)] == [1, 2, 3]
    assert reopened.last_seq() == 3


def test_spool_drops_the_oldest_over_its_bound_and_says_so_until_announced(tmp_path):
    spool = Spool(tmp_path / "spool", max_reports=3)
    for seq in range(1, 6):
        spool.append(_report(seq))
    assert [r["seq"] for _, r in spool.peek(10)] == [3, 4, 5]
    notice, count = Spool(tmp_path / "spool", max_reports=3).drop_notice()  # survives a restart
    assert count == 2 and notice.startswith("2 reports dropped unsent (seq 1..2)")
    spool.forget_drops(count)
    assert spool.drop_notice() == (None, 0)


def test_spool_moves_unreadable_files_aside_instead_of_sending_them(tmp_path):
    spool = Spool(tmp_path / "spool")
    spool.append(_report(1))
    (tmp_path / "spool" / "000000000002.json").write_text("{truncated")
    assert [r["seq"] for _, r in spool.peek(10)] == [1]
    assert (tmp_path / "spool" / "rejected" / "000000000002.json").exists()


def test_client_maps_statuses_to_outcomes(portal, refused_url):
    client = PortalClient(portal.url, TOKEN, timeout=5)
    assert client.post_reports([_report(1)]) == {"accepted": 1, "duplicates": 0}
    assert client.post_reports([_report(1)]) == {"accepted": 0, "duplicates": 1}
    portal.reject_ids.add("r00000002")
    with pytest.raises(PortalRejected) as rejected:
        client.post_reports([_report(2)])
    assert rejected.value.status == 400 and rejected.value.body["detail"] == "report r00000002 is malformed"
    with pytest.raises(PortalAuthError):
        PortalClient(portal.url, "nwa_wrong").post_reports([_report(3)])
    portal.mode = "down"
    with pytest.raises(PortalUnavailable):
        client.post_reports([_report(3)])
    with pytest.raises(PortalUnavailable):
        PortalClient(refused_url, TOKEN, timeout=5).post_reports([_report(3)])


def test_backoff_grows_with_jitter_up_to_its_cap_and_resets():
    now = [0.0]
    backoff = Backoff(5, 300, clock=lambda: now[0], rand=lambda: 1.0)
    assert [backoff.failed() for _ in range(8)] == [5, 10, 20, 40, 80, 160, 300, 300]
    assert not backoff.ready()
    now[0] = 300.0
    assert backoff.ready()
    backoff.succeeded()
    assert Backoff(5, 300, rand=lambda: 0.0).failed() == 5  # full jitter never goes below the minimum


def _agent(tmp_path, url, ib_root, **overrides):
    settings = {
        "url": url,
        "token": TOKEN,
        "state_dir": tmp_path / "state",
        "hostname": "gpu-node-01",
        "batch_size": 3,
        "request_timeout_s": 5,
    }
    settings.update(overrides)
    now = [0.0]  # the backoff's clock, moved by hand: no test waits for real time
    agent = Agent(
        Config(**settings), [InfinibandCollector(ib_root)], PortalClient(url, TOKEN, timeout=5), clock=lambda: now[0]
    )
    agent.now = now
    return agent


def _later(agent, seconds=1000.0):
    agent.now[0] += seconds


def test_it_delivers_every_report_in_order_after_an_outage(tmp_path, portal, ib_root):
    agent = _agent(tmp_path, portal.url, ib_root)
    portal.mode = "down"
    for _ in range(7):
        agent.collect()
        agent.flush()
        _later(agent)
    assert portal.received == [] and len(agent.spool) == 7
    portal.mode = "ok"
    assert agent.flush() == 7
    assert portal.seqs() == [1, 2, 3, 4, 5, 6, 7]
    assert [n for method, _, n in portal.requests if method == "POST"][-3:] == [3, 3, 1]  # batches in order
    assert len(agent.spool) == 0


def test_a_busy_portal_s_retry_after_is_honoured(tmp_path, portal, ib_root):
    portal.mode, portal.retry_after = "down", 600  # the portal's ingest queue is full: "come back in 10 min"
    with pytest.raises(PortalUnavailable) as busy:
        PortalClient(portal.url, TOKEN, timeout=5).post_reports([_report(1)])
    assert busy.value.status == 503 and busy.value.retry_after == 600
    agent = _agent(tmp_path, portal.url, ib_root)
    agent.collect()
    assert agent.flush() == 0  # its own first backoff would be 5 s
    portal.mode = "ok"
    _later(agent, 300.0)
    assert agent.flush() == 0, "the portal asked for 600 s"
    _later(agent, 301.0)
    assert agent.flush() == 1 and len(agent.spool) == 0


def test_it_keeps_reports_when_the_token_is_refused(tmp_path, portal, ib_root):
    agent = _agent(tmp_path, portal.url, ib_root)
    portal.mode = "auth"
    agent.collect()
    assert agent.flush() == 0 and len(agent.spool) == 1 and agent.backoff.failures == 1
    portal.mode = "ok"
    assert agent.flush() == 0, "backing off: no retry before the delay is over"
    _later(agent)
    assert agent.flush() == 1 and portal.seqs() == [1]


def test_it_sets_a_rejected_report_aside_and_never_retries_it(tmp_path, portal, ib_root):
    agent = _agent(tmp_path, portal.url, ib_root)
    reports = [agent.collect() for _ in range(3)]
    portal.reject_ids.add(reports[1]["report_id"])
    assert agent.flush() == 3
    assert portal.seqs() == [1, 3]
    rejected = tmp_path / "state" / "spool" / "rejected"
    assert (rejected / "000000000002.json").exists()
    assert "malformed" in (rejected / "000000000002.reason.txt").read_text()
    posts = len(portal.requests)
    agent.collect()
    agent.flush()
    assert portal.seqs() == [1, 3, 4] and len(portal.requests) == posts + 1


def test_nothing_is_lost_across_an_agent_restart(tmp_path, refused_url, portal, ib_root):
    down = _agent(tmp_path, refused_url, ib_root)
    for _ in range(4):
        down.collect()
        down.flush()
    restarted = _agent(tmp_path, portal.url, ib_root)
    restarted.collect()
    restarted.flush()
    assert portal.seqs() == [1, 2, 3, 4, 5]  # seq keeps rising across the restart
    assert len({r["report_id"] for r in portal.received}) == 5


def test_a_dropped_report_is_announced_in_the_next_report(tmp_path, refused_url, ib_root, portal):
    agent = _agent(tmp_path, refused_url, ib_root, spool_max_reports=2)
    for _ in range(3):
        agent.collect()  # the third pushes seq 1 out
    announced = agent.collect()  # ... and this one (which pushes seq 2 out) says so
    assert announced["collector_errors"]["spool"].startswith("1 reports dropped unsent (seq 1..1)")
    agent.client = PortalClient(portal.url, TOKEN, timeout=5)
    agent.flush()
    assert portal.seqs() == [3, 4]
    assert agent.collect()["collector_errors"]["spool"].startswith("1 reports dropped unsent (seq 2..2)")
    assert "spool" not in agent.collect().get("collector_errors", {})


def test_it_runs_checks_only_when_the_portal_says_idle_and_posts_results(tmp_path, portal, ib_root):
    agent = _agent(tmp_path, portal.url, ib_root)
    portal.checks = {"idle": False, "checks": [{"id": 7, "kind": "dcgm_diag", "params": {"level": 1}}]}
    agent.poll_checks(wait=True)
    assert portal.results == {}
    portal.checks["idle"] = True
    agent.check_env.which = lambda name: None  # no DCGM on this machine
    agent.poll_checks(wait=True)
    assert portal.results[7]["status"] == "not_available"
    assert portal.results[7]["started_at"].endswith("+00:00")
