"""A running check is killed when the node is taken back: the real agent, the real portal, a real
process tree. The tool the check started is a real long-running subprocess (``sleep``, standing in
for dcgmi, which cannot run here); everything else is the agent's own code path."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from nodes.models import Run

from .conftest import Portal


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (the test's container may have none)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_the_customer_takes_the_node_back_and_the_running_check_is_killed(
    live_server, node, agent_token, hardware, operator, tmp_path
):
    pid_file = tmp_path / "tool.pid"

    def long_running_tool(argv, timeout):
        # What dcgmi -r 3 does for ~30 minutes: a child of the check, in the check's process group.
        return subprocess.run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 300"], capture_output=True, text=True)

    agent = hardware.agent(live_server.url, agent_token, check_watch_s=0.5)
    agent.check_env.runner = long_running_tool
    agent.check_env.which = lambda name: f"/usr/bin/{name}"
    agent.cycle()  # the node reports 0 compute processes: idle
    portal = Portal(live_server.url, operator)
    status, run = portal.post(
        f"/api/nodes/{node.pk}/checks/", {"kind": "dcgm_diag", "params": {"level": 3}, "reason": "routine"}
    )
    assert status == 201, run
    agent.poll_checks()  # the check starts in the background, as in the agent's loop
    deadline = time.monotonic() + 15
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    tool = int(pid_file.read_text())
    assert alive(tool)

    asked = time.monotonic()
    status, answer = portal.post(f"/api/nodes/{node.pk}/give-back/", {"reason": "training job waiting"})
    assert status == 200, answer
    agent._check_thread.join(timeout=15)
    took = time.monotonic() - asked

    assert not agent._check_thread.is_alive()
    assert not alive(tool), "the tool the check started was killed with it"
    assert not list((hardware.state_dir / "check-results").glob("*.json")), "nothing to post for a killed check"
    recorded = Run.objects.get(pk=run["id"])
    assert recorded.status == "cancelled" and recorded.details["preempted"]["by"] == "operator"
    print(f"check process group killed {took:.2f} s after the give-back (watch interval 0.5 s)")
    assert took < 8
