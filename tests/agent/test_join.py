"""``nodewarden-agent join`` against the real portal (pytest-django's live server).

The join runs as cloud-init runs it: a separate process of this checkout's agent, with
the agent config file cloud-init writes (its token file does not exist yet). Then the
agent, started with the token the join wrote, sends its first report and the portal
accepts it. Hardware is simulated as in tests/e2e (NVML, kmsg, sysfs).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from health import ruleconfig, xid
from nodes.choices import NodeState
from nodes.models import NodeEvent
from nodes.services import Actor
from provisioning import services
from telemetry.auth import forget_cached_tokens
from telemetry.models import NodeHealth, NodeReport
from tests.factories import HardwareProfileFactory, NodeFactory

from .conftest import AGENT_SRC

pytestmark = pytest.mark.django_db(transaction=True)
HOSTNAME = "gpu-join-01.dc1.example.com"


@pytest.fixture(autouse=True)
def _fresh_process_state() -> Iterator[None]:
    """Token, rule and XID lookups are cached per process, and the live server shares this process."""
    for forget in (forget_cached_tokens, ruleconfig.invalidate_cache, xid.invalidate_cache):
        forget()
    yield
    for forget in (forget_cached_tokens, ruleconfig.invalidate_cache, xid.invalidate_cache):
        forget()


@pytest.fixture
def node(db):
    return NodeFactory(hostname=HOSTNAME, state=NodeState.ENROLLED, hardware_profile=HardwareProfileFactory())


@pytest.fixture
def join_token(node) -> str:
    return services.prepare_boot(node.pk, actor=Actor.system("tests"), reason="racked")[1]


def agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """This checkout's agent as its own process: what cloud-init's runcmd starts."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NODEWARDEN_")}
    clean.update({"PYTHONPATH": str(AGENT_SRC), "NODEWARDEN_HOSTNAME": HOSTNAME, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "nodewarden_agent.cli", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def cloud_init_config(tmp_path: Path, url: str) -> Path:
    """/etc/nodewarden-agent/config.json as the user-data writes it."""
    path = tmp_path / "etc" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"url": url, "hostname": HOSTNAME, "token_file": str(tmp_path / "etc" / "token")}))
    return path


def test_the_agent_joins_the_node_goes_onboard_and_its_first_report_is_accepted(
    live_server, node, join_token, tmp_path
):
    from tests.e2e.conftest import SimulatedNode

    config = cloud_init_config(tmp_path, live_server.url)
    done = agent("--config", str(config), "join", "--url", live_server.url, "--join-token", join_token)

    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "etc" / "token"
    assert done.stdout.strip() == f"joined as {HOSTNAME} (node {node.pk}); agent token written to {token_file}"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token.startswith("nwa_")
    assert sorted(p.name for p in token_file.parent.iterdir()) == ["config.json", "token"], "no temporary file left"
    node.refresh_from_db()
    assert node.state == NodeState.ONBOARD
    onboard = NodeEvent.objects.get(node=node, transition="mark_onboard")
    assert onboard.details["facts"]["agent_version"] and onboard.details["hostname"] == HOSTNAME

    # The service starts: `run` reads the same config file, and with it the token the join wrote.
    from nodewarden_agent.config import load_config

    loaded = load_config(env={"NODEWARDEN_STATE_DIR": str(tmp_path / "state")}, config_file=str(config))
    assert loaded.token == token
    hardware = SimulatedNode(tmp_path / "node", HOSTNAME)
    first = hardware.agent(loaded.url, loaded.token)
    first.cycle()
    assert len(first.spool) == 0, "the portal accepted the first report"
    assert NodeReport.objects.filter(node=node).count() == 1
    assert NodeHealth.objects.get(node=node).gpu_count == 8


def test_the_token_goes_to_the_state_dir_without_a_configured_token_file(live_server, node, join_token, tmp_path):
    done = agent("join", "--url", live_server.url, "--join-token", join_token, "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s" / "token").read_text().startswith("nwa_")


def test_a_second_join_with_the_same_token_is_refused_with_exit_3_and_keeps_the_first_token(
    live_server, node, join_token, tmp_path
):
    args = ("join", "--url", live_server.url, "--join-token", join_token, "--state-dir", str(tmp_path))
    assert agent(*args).returncode == 0
    first = (tmp_path / "token").read_text()

    again = agent(*args)

    assert again.returncode == 3
    assert "join refused: HTTP 409 join token already used: Join token" in again.stderr
    assert (tmp_path / "token").read_text() == first


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"token": "nwj_" + "x" * 43}, 401, "unknown join token"),
        ({"hostname": "gpu-other-01"}, 403, "wrong node"),
    ],
)
def test_refusals_exit_3_with_the_portals_reason_and_write_nothing(
    live_server, node, join_token, tmp_path, change, status, error
):
    done = agent(
        "join",
        "--url",
        live_server.url,
        "--join-token",
        change.get("token", join_token),
        "--state-dir",
        str(tmp_path),
        env={"NODEWARDEN_HOSTNAME": change.get("hostname", HOSTNAME)},
    )
    assert done.returncode == 3
    assert f"HTTP {status} {error}" in done.stderr
    assert not (tmp_path / "token").exists()
    node.refresh_from_db()
    assert node.state == NodeState.INITIALIZING


def test_an_unreachable_portal_exits_1_once_the_wait_is_over(refused_url, tmp_path):
    done = agent("join", "--url", refused_url, "--join-token", "nwj_x", "--state-dir", str(tmp_path), "--wait", "0")
    assert done.returncode == 1
    assert "portal unavailable" in done.stderr and not (tmp_path / "token").exists()


def test_usage_errors_exit_2(tmp_path):
    assert agent("join", "--join-token", "nwj_x", "--state-dir", str(tmp_path)).returncode == 2  # no URL
    done = agent("join", "--url", "ftp://x", "--join-token", "nwj_x", "--state-dir", str(tmp_path))
    assert done.returncode == 2 and "must start with http" in done.stderr
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = agent(
        "join",
        "--url",
        "http://127.0.0.1:1",
        "--join-token",
        "nwj_x",
        "--token-file",
        str(blocked / "token"),
        "--wait",
        "0",
    )
    assert done.returncode == 2 and "cannot write the token file" in done.stderr


# --- the pieces, in-process ---------------------------------------------------------------------
def test_an_unreachable_portal_is_retried_until_it_answers(monkeypatch):
    from nodewarden_agent import join
    from nodewarden_agent.client import PortalUnavailable

    answers = [PortalUnavailable("refused"), PortalUnavailable("refused"), {"node_token": "nwa_x"}]
    slept: list[float] = []

    def post(url, payload, timeout):  # type: ignore[no-untyped-def]
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(join, "post_join", post)
    settings = join.JoinSettings(url="http://portal", join_token="nwj_x", hostname="h", token_file=Path("t"))
    assert join.join_with_retries(settings, {}, sleep=slept.append, clock=lambda: 0.0) == {"node_token": "nwa_x"}
    assert len(slept) == 2 and all(2.0 <= s <= 30.0 for s in slept)


def test_the_token_replaces_an_old_one_atomically_and_only_root_may_read_it(tmp_path):
    from nodewarden_agent.join import write_token

    path = tmp_path / "token"
    path.write_text("nwa_old\n")
    os.chmod(path, 0o644)
    write_token(path, "nwa_new")
    assert path.read_text() == "nwa_new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["token"]


def test_facts_name_the_kernel_os_boot_and_macs_and_skip_what_is_missing(tmp_path):
    from nodewarden_agent.join import collect_facts

    (tmp_path / "net" / "lo").mkdir(parents=True)
    (tmp_path / "net" / "lo" / "address").write_text("00:00:00:00:00:00\n")
    (tmp_path / "net" / "enp1s0").mkdir()
    (tmp_path / "net" / "enp1s0" / "address").write_text("3c:ec:ef:12:34:56\n")
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n')
    facts = collect_facts(tmp_path / "net", tmp_path / "os-release", tmp_path / "no-boot-id")
    assert facts["macs"] == {"enp1s0": "3c:ec:ef:12:34:56"} and facts["os"] == "Ubuntu 24.04.1 LTS"
    assert "boot_id" not in facts and facts["kernel"]


def test_the_join_subcommand_is_in_the_cli():
    from nodewarden_agent.cli import _parser

    args = _parser().parse_args(["join", "--url", "http://p", "--join-token", "nwj_x", "--state-dir", "/s"])
    assert isinstance(args, argparse.Namespace)
    assert (args.command, args.url, args.join_token, args.state_dir, args.wait) == (
        "join",
        "http://p",
        "nwj_x",
        "/s",
        300.0,
    )
