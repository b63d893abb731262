"""Issue 16, "Agent command channel": a command travels portal -> real agent -> result -> history.

The portal is the live server; the agent is the real package polling over HTTP. NVML is the
FakeNvml of a real H100 and the command runner a recorder (a mock: a test may not reset this
machine's GPUs or reboot it); the InfiniBand tree is the kernel's sysfs format (conftest).
"""

from __future__ import annotations

import subprocess

import pytest

from nodes.choices import EventKind
from nodes.models import NodeEvent
from nodewarden_agent.commands import CommandEnv
from telemetry.models import AgentCommand

from .conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


class Runner:
    """Records each argv the agent would run; answers like the real tools."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        out = {"nvidia-smi -q": "==============NVSMI LOG==============\nAttached GPUs : 8\n"}.get(" ".join(argv), "")
        return subprocess.CompletedProcess(argv, 0, out or "[2026-01-01T00:00:00] NVRM: Xid 94\n", "")


def test_a_gpu_reset_and_a_diagnostics_bundle_go_from_operator_to_agent_and_back_into_history(
    live_server, node, agent_token, hardware, operator
):
    portal = Portal(live_server.url, operator)
    runner = Runner()
    agent = hardware.agent(live_server.url, agent_token)
    agent.command_env = CommandEnv(runner=runner, nvml=lambda: hardware.nvml, ib_root=hardware.ib_root)
    hardware.nvml.data["gpus"][5]["pids"] = [31337]  # a job holds GPU 5

    url = f"/api/nodes/{node.pk}/commands/"
    issued = [
        portal.post(url, {"verb": "reset_gpu", "args": {"gpu": 3}, "reason": "XID 94 on GPU 3"}),
        portal.post(url, {"verb": "reset_gpu", "args": {"gpu": 5}, "reason": "XID 94 on GPU 5"}),
        portal.post(url, {"verb": "collect_diagnostics", "args": {}, "reason": "ticket 42"}),
    ]
    assert [status for status, _ in issued] == [201, 201, 201]
    ids = [body["id"] for _, body in issued]

    assert agent.poll_commands() == 3
    assert agent.poll_commands() == 0, "each command is delivered once"

    assert runner.calls[0] == ["nvidia-smi", "--gpu-reset", "-i", "3"]
    assert ["nvidia-smi", "--gpu-reset", "-i", "5"] not in runner.calls
    done = {c.pk: c for c in AgentCommand.objects.filter(pk__in=ids)}
    reset, busy, diagnostics = (done[i] for i in ids)
    assert (reset.status, reset.summary) == ("succeeded", "GPU 3 reset")
    assert (busy.status, busy.summary) == ("failed", "busy: 1 processes")
    assert diagnostics.status == "succeeded"
    assert "NVSMI LOG" in diagnostics.result["nvidia_smi"] and "Xid 94" in diagnostics.result["kernel_log"]
    assert [p["state"] for p in diagnostics.result["infiniband"]] == ["ACTIVE"] * 8

    history = NodeEvent.objects.filter(node=node, kind=EventKind.ACTION, details__agent_command__in=ids)
    rows = sorted((e.details["agent_command"], e.actor_name, e.reason) for e in history)
    assert rows[:2] == [
        (ids[0], "operator", f"Agent command reset_gpu (gpu 3) #{ids[0]} issued: XID 94 on GPU 3"),
        (ids[0], f"system:agent:{node.hostname}", f"Agent command reset_gpu (gpu 3) #{ids[0]} succeeded: GPU 3 reset"),
    ]
    assert len(rows) == 6
    status, listed = portal.get(url)
    assert status == 200 and {c["status"] for c in listed["results"]} == {"succeeded", "failed"}
