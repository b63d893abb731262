"""``nodewarden-slurm-check`` (the agent's Slurm prolog / HealthCheckProgram) against the live portal.

The script runs as Slurm runs it: a separate process with the node's agent token in its
environment, asking the real portal (``GET /api/agent/state/``). Its ``--drain`` runs the real
``scontrol`` of a real Slurm 22.05 (sandbox.emulators.slurm) where one can run here.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from nodes import services
from nodes.choices import NodeState
from sandbox.emulators.slurm import SlurmCluster
from tests.conftest import require_slurm

from .conftest import AGENT_SRC, HOSTNAME

ACTOR = services.Actor.system("test")


def check(url: str, token: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(AGENT_SRC),
        "NODEWARDEN_URL": url,
        "NODEWARDEN_TOKEN": token,
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "nodewarden_agent.slurm_check", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_lets_a_job_start_in_production_and_refuses_it_once_the_node_is_out(live_server, node, agent_token):
    assert check(live_server.url, agent_token).returncode == 0
    services.request_drain(node.pk, actor=ACTOR, reason="Remediation 3: XID 79: GPU 2 has fallen off the bus")
    refused = check(live_server.url, agent_token)
    assert refused.returncode == 1
    assert "out of production: Drain pending: Remediation 3: XID 79" in refused.stderr
    services.cancel_drain(node.pk, actor=ACTOR, reason="cleared")
    assert check(live_server.url, agent_token).returncode == 0


def test_the_portal_answers_the_state_to_the_nodes_agent_only(live_server, node, agent_token, client):
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    assert api.get("/api/agent/state/").json() == {"state": NodeState.PRODUCTION, "in_production": True, "reason": ""}
    assert APIClient().get("/api/agent/state/").status_code in (401, 403)


def test_a_portal_outage_fails_open_unless_told_otherwise(node, agent_token, refused_url):
    down = check(refused_url, agent_token)
    assert down.returncode == 0 and "could not be asked" in down.stderr
    assert check(refused_url, agent_token, "--fail-closed").returncode == 3


def test_without_a_token_it_is_a_configuration_error(live_server, tmp_path):
    missing = check(live_server.url, "", env={"NODEWARDEN_STATE_DIR": str(tmp_path)})
    assert missing.returncode == 2 and "NODEWARDEN_TOKEN" in missing.stderr


def test_as_health_check_program_it_drains_the_node_in_a_real_slurm(live_server, node, agent_token, slurm):
    services.request_drain(node.pk, actor=ACTOR, reason="customer report: NCCL hangs")
    scontrol = subprocess.run(["which", "scontrol"], capture_output=True, text=True).stdout.strip()
    env = {**slurm.env(), "NODEWARDEN_HOSTNAME": "gpu-s-03"}
    answer = check(live_server.url, agent_token, "--drain", "--scontrol", scontrol, env=env)
    assert answer.returncode == 1, answer.stderr
    reason = slurm.run("sinfo", "-R", "-h", "-n", "gpu-s-03", "-o", "%E").stdout.strip()
    assert reason.startswith("nodewarden: Drain pending: customer report: NCCL hangs"), reason
    assert slurm.node_state("gpu-s-03").startswith("drain")


def prolog_script(folder: Path, url: str, token: str) -> Path:
    """The hook as a site installs it: a Prolog= script slurmd runs as root before each job, with
    none of slurmd's environment (Slurm gives a prolog only SLURM_* variables), so it sets its own."""
    script = folder / "nodewarden-prolog"
    script.write_text(
        "#!/bin/sh\n"
        f"export NODEWARDEN_URL={shlex.quote(url)} NODEWARDEN_TOKEN={shlex.quote(token)}\n"
        f"export PYTHONPATH={shlex.quote(str(AGENT_SRC))} NODEWARDEN_STATE_DIR={shlex.quote(str(folder / 'state'))}\n"
        f"exec {shlex.quote(sys.executable)} -m nodewarden_agent.slurm_check\n"
    )
    script.chmod(0o755)
    return script


def test_as_prolog_in_a_real_slurmd_a_job_runs_in_production_and_is_refused_once_the_node_is_out(
    live_server, node, agent_token, tmp_path
):
    require_slurm()
    name = HOSTNAME.split(".", 1)[0]
    script = prolog_script(tmp_path, live_server.url, agent_token)
    with SlurmCluster([name], extra_conf=f"Prolog={script}") as cluster:
        first = cluster.submit(name, 1, "in-production")
        cluster.wait_job_state(first, "R", "CD", timeout=30)  # the prolog said yes: it ran
        assert cluster.node_state(name).startswith(("idle", "mix", "alloc", "compl")), cluster.node_state(name)

        # Out of production; only the prolog stands between the job and the node here (this test
        # runs no follow-up that would drain the node in this Slurm: the cluster is another).
        services.request_drain(node.pk, actor=ACTOR, reason="customer report: NCCL hangs")
        second = cluster.submit(name, 1, "while-out", requeue=True)
        state = cluster.wait_node_state(name, "drain", "drained", "draining", timeout=30)
        assert state.startswith("drain"), state
        reason = cluster.run("sinfo", "-R", "-h", "-n", name, "-o", "%E").stdout.strip()
        assert reason == "Prolog error", reason  # Slurm's own drain of a node whose prolog failed
        assert cluster.job_state(second) == "PD"  # requeued: it never ran here
        log = cluster.log_tail(f"slurmd-{name}", 200)
        said = "nodewarden-slurm-check: Nodewarden has this node out of production: Drain pending: customer report"
        assert said in log, log
