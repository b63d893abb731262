"""Done-when of issue 4: a racked server goes from enrollment to production on its own.

Everything real that can run here: the portal (live server), Celery follow-ups (run
inline as tasks, eager), the sushy-tools Redfish emulator as the server's BMC, cloud-init's
own schema validator, the real agent's join command (a separate process, as cloud-init
runs it) and the real agent on simulated hardware (NVML, sysfs, kmsg as in tests/e2e).
Two things stand in for what cannot exist here, said where they are used: the PXE boot
itself (the test fetches the node's user-data and runs its join command, which is what
the installed OS does), and the GPU tools (dcgmi and all_reduce_perf answer with their
captured real output; no PyTorch, so GPU stress and memory test report "not available").
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodes.choices import NodeState, RunStatus
from nodes.models import Node, NodeEvent
from nodewarden.celery import app as celery_app
from sandbox.emulators.bmc import RedfishEmulator
from tests.factories import ClusterFactory, HardwareProfileFactory
from validation import services as validation
from validation.models import Day1Spec

from .conftest import AGENT_FIXTURES, AGENT_SRC, Portal, SimulatedNode

pytestmark = pytest.mark.django_db(transaction=True)
HOSTNAME = "gpu-bringup-01.dc1.example.com"
SERIAL = "SN-BRINGUP-0001"
IMAGE = "http://repo.example/firmware/bios-2.1.7.bin"
S = NodeState


@pytest.fixture(autouse=True)
def eager_followups(settings):
    """Follow-up tasks run inline in whichever thread commits (the live server's, or this one)."""
    settings.NODEWARDEN_BMC_POLL_INTERVAL = 0.05
    settings.NODEWARDEN_BMC_POWER_TIMEOUT = 10
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def captured_tools(argv, timeout):
    """dcgmi and all_reduce_perf as this machine cannot run them: their captured real output."""
    name = Path(argv[0]).name
    text = {
        "dcgmi": AGENT_FIXTURES / "dcgm" / "diag-r1-pass-dcgm3.txt",
        "all_reduce_perf": AGENT_FIXTURES / "nccl" / "all_reduce_h100x8.txt",
    }[name].read_text()
    return subprocess.CompletedProcess(argv, 0, text, "")


def booted_agent(hardware: SimulatedNode, url: str, token: str):
    from nodewarden_agent.checks import CheckEnv

    def no_gpu_libraries(name):
        raise ImportError(f"No module named {name!r}")

    agent = hardware.agent(url, token)
    agent.check_env = CheckEnv(
        runner=captured_tools,
        which=lambda name: f"/usr/bin/{name}" if name in ("dcgmi", "all_reduce_perf") else None,
        importer=no_gpu_libraries,
    )
    return agent


def run_join_command(user_data: str, tmp_path: Path) -> Path:
    """What the installed OS does with the user-data: runs its join command (this checkout's agent)."""
    document = yaml.safe_load(user_data)
    script = next(c[-1] for c in document["runcmd"] if c[:2] == ["sh", "-c"] and " join " in c[-1])
    command = shlex.split(script.split(" && ")[0])  # the join runs first; systemctl and the rest need a real OS
    args = command[command.index("join") :]
    token_dir = tmp_path / "agent-state"
    done = subprocess.run(
        [sys.executable, "-m", "nodewarden_agent.cli", *args, "--state-dir", str(token_dir)],
        env={"PYTHONPATH": str(AGENT_SRC), "NODEWARDEN_HOSTNAME": HOSTNAME, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return token_dir / "token"


def test_a_racked_server_walks_from_enrollment_to_production_with_no_human_after_enrolling(
    live_server, operator, tmp_path, settings
):
    settings.PORTAL_URL = settings.NODEWARDEN_PORTAL_URL = live_server.url
    profile = HardwareProfileFactory(
        name="HGX H100 e2e",
        firmware_baseline={"bios": {"version": "2.1.7", "image": IMAGE}, "bmc": "1.00", "gpu_vbios": "96.00.99.00.01"},
    )
    Day1Spec.objects.create(
        hardware_profile=profile, burn_in_seconds=5, dcgm_level=1, min_busbw_gbps=300, soak_seconds=0
    )
    cluster = ClusterFactory(name="e2e-slurm")
    portal = Portal(live_server.url, operator)

    with RedfishEmulator(
        [{"name": HOSTNAME, "bios_version": "2.0.7", "memory_gib": 2048, "cpus": 112, "power_state": "Off"}]
    ) as bmc:
        # Day 0: an operator enrolls the server by its BMC; the rest happens without anyone.
        status, body = portal.post(
            "/api/enrollments/",
            {
                "hostname": HOSTNAME,
                "serial": SERIAL,
                "bmc_address": bmc.url,
                "bmc_username": bmc.username,
                "bmc_password": bmc.password,
                "bmc_system_id": bmc.systems[0]["uuid"],
                "hardware_profile": profile.name,
                "site": cluster.site.slug,
                "cluster": cluster.name,
                "reason": "Rack 12 U30, delivery 4711",
            },
        )
        assert status == 201, body
        node = Node.objects.get(pk=body["id"])
        assert node.state == S.INITIALIZING
        system = bmc.system(0)
        assert system["PowerState"] == "On" and system["Boot"]["BootSourceOverrideTarget"] == "Pxe"

        # The installer boots with ds=nocloud;s=<seed>: cloud-init fetches the user-data...
        seed = f"/cloud-init/{node.boot_config.instance_key}/"
        status, user_data = portal.get(seed + "user-data", page=True)
        assert status == 200 and user_data.startswith("#cloud-config")
        (tmp_path / "user-data").write_text(user_data)
        schema = subprocess.run(
            ["cloud-init", "schema", "--config-file", str(tmp_path / "user-data")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert schema.returncode == 0, schema.stdout + schema.stderr
        # ... and runs the agent's join: Onboard, and Day 1 begins on its own (firmware updated via the BMC).
        token = run_join_command(user_data, tmp_path).read_text().strip()
        node.refresh_from_db()
        assert node.state == S.INVENTORY_CHECK, NodeEvent.objects.filter(node=node).first().reason
        assert bmc.system(0)["BiosVersion"] == "2.1.7"

        # The agent service starts and reports; the beat task polls the open stages.
        agent = booted_agent(SimulatedNode(tmp_path / "node", HOSTNAME), live_server.url, token)
        agent.cycle()
        validation.advance_open_stages()
        node.refresh_from_db()
        assert node.state == S.BURN_IN
        agent.poll_checks(wait=True)  # the node is idle: the agent takes the burn-in checks and runs them
        agent.cycle()
        validation.advance_open_stages()

    node.refresh_from_db()
    assert node.state == S.PRODUCTION, [(r.kind, r.status, r.summary) for r in node.runs.all()]
    road = list(
        NodeEvent.objects.filter(node=node, kind="transition")
        .order_by("created", "id")
        .values_list("target_state", "actor_name")
    )
    assert [state for state, _ in road] == [
        S.INITIALIZING,
        S.ONBOARD,
        S.FIRMWARE_UPDATE,
        S.INVENTORY_CHECK,
        S.BURN_IN,
        S.FABRIC_CHECK,
        S.RELIABILITY_ASSESSMENT,
        S.PRODUCTION,
    ]
    assert all(actor.startswith("system:") for _, actor in road[1:]), road  # nobody after the enrollment
    stages = {r.kind: r for r in node.runs.filter(kind__startswith="stage_")}
    assert all(r.status == RunStatus.PASSED for r in stages.values())
    assert stages["stage_firmware"].details["evidence"]["updated"] == ["bios"]
    assert stages["stage_burn_in"].figures["nccl_test.busbw_gbps"] > 300
    assert "GPU stress test not available" in stages["stage_burn_in"].summary
