"""The training-step check on the node: only workloads of the agent's own config run, without a
shell, with a time limit and bounded output; the figures come from the workload's JSON line.

The builtin workload really trains (PyTorch on the CPU here); the external ones are small
Python scripts written to tmp_path, started exactly as a real workload would be.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nodewarden_agent.agent import Agent
from nodewarden_agent.checks import OUTPUT_MAX_BYTES, CheckEnv, run_check
from nodewarden_agent.config import BUILTIN_WORKLOADS, ConfigError, load_config


def configured(tmp_path: Path, workloads: dict) -> CheckEnv:
    """The CheckEnv an agent started with this ``workloads`` setting in its config file builds."""
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"workloads": workloads}))
    config = load_config(env={}, config_file=str(path), require_portal=False)
    return Agent(config, [], client=None).check_env


def script(tmp_path: Path, body: str, name: str = "workload.py") -> list[str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_the_builtin_tiny_train_really_trains_on_the_cpu_and_reports_its_figures():
    pytest.importorskip("torch", reason="the builtin workload needs PyTorch (agent extra 'workload')")
    result = run_check("training_step", {"workload": "tiny-train"}, CheckEnv())

    assert result["status"] == "passed", result
    figures = result["figures"]
    assert figures["steps"] == 40 and figures["samples_per_s"] > 0 and figures["seconds"] > 0
    assert figures["loss_finite"] == 1.0 and 0 < figures["loss"] < math.log(10)  # below chance: it learned
    assert result["summary"].startswith("workload tiny-train: ") and "samples/s" in result["summary"]


def test_without_pytorch_the_builtin_is_not_available_not_a_failure(tmp_path, monkeypatch):
    # A "torch" package that refuses to import, first on the workload's path: as on a node without PyTorch.
    blocked = tmp_path / "no-torch" / "torch"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    monkeypatch.setenv("PYTHONPATH", str(blocked.parent))

    result = run_check("training_step", {}, CheckEnv())

    assert result["status"] == "not_available"
    assert result["summary"] == "workload tiny-train: PyTorch is not installed on the node (No module named torch)"
    assert result["figures"] == {}


def test_a_configured_workload_runs_without_the_agents_token_and_its_figures_come_back(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEWARDEN_TOKEN", "nwa_secret")
    argv = script(
        tmp_path,
        """
        import json, os, sys
        print("step 1/2 ...")
        print("a progress line on stderr", file=sys.stderr)
        print(json.dumps({"samples_per_s": 5120.5, "loss": 0.41, "steps": 2, "seconds": 0.5, "label": "x",
                          "token_seen": int("NODEWARDEN_TOKEN" in os.environ), "args": len(sys.argv)}))
        """,
    )
    env = configured(tmp_path, {"llama-step": {"argv": [*argv, "--steps", "2"], "timeout_s": 30}})

    result = run_check("training_step", {"workload": "llama-step"}, env)

    assert result["status"] == "passed", result
    assert result["figures"] == {
        "samples_per_s": 5120.5,
        "loss_finite": 1.0,
        "loss": 0.41,
        "steps": 2.0,
        "seconds": 0.5,
        "token_seen": 0.0,
        "args": 3.0,
    }
    assert result["summary"] == "workload llama-step: 5,120.5 samples/s, loss 0.41, 0.5 s"
    assert "a progress line on stderr" in result["output"]
    assert set(env.workloads) == {"tiny-train", "llama-step"}, "the builtin stays next to the configured ones"


def test_the_agent_refuses_a_workload_its_config_does_not_name(tmp_path):
    marker = tmp_path / "ran"
    argv = script(tmp_path, f"open({str(marker)!r}, 'w').close()")
    env = configured(tmp_path, {"mine": {"argv": argv}})

    for name in ("rm -rf /", "/bin/sh", "other"):
        result = run_check("training_step", {"workload": name}, env)
        assert result["status"] == "error"
        assert result["summary"] == f"workload {name!r} is not in this agent's config (configured: mine, tiny-train)"
    assert not marker.exists()
    assert run_check("training_step", {"workload": ["/bin/sh", "-c", "id"]}, env)["status"] == "error"


def test_a_non_finite_loss_is_reported_as_loss_finite_0_for_the_portal_to_judge(tmp_path):
    argv = script(tmp_path, 'print(\'{"samples_per_s": 100.0, "loss": NaN, "steps": 4, "seconds": 1}\')')
    result = run_check("training_step", {"workload": "w"}, configured(tmp_path, {"w": {"argv": argv}}))

    assert result["status"] == "passed"  # the verdict is the portal's
    assert result["figures"] == {"samples_per_s": 100.0, "loss_finite": 0.0, "steps": 4.0, "seconds": 1.0}
    assert "loss is not finite" in result["summary"]
    json.dumps(result, allow_nan=False)  # what the portal receives is strict JSON


def test_a_workload_past_its_time_limit_is_killed_with_its_children_and_fails(tmp_path):
    argv = script(
        tmp_path,
        """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(60)
        """,
    )
    began = time.monotonic()
    result = run_check("training_step", {"workload": "w"}, configured(tmp_path, {"w": {"argv": argv, "timeout_s": 1}}))

    assert time.monotonic() - began < 10, "the grandchild holding the pipes was killed too"
    assert result["status"] == "failed"
    assert result["summary"] == "workload w did not finish within 1 s"
    assert result["figures"]["timed_out"] == 1.0


def test_a_crashing_workload_fails_and_one_without_figures_is_an_error(tmp_path):
    crash = script(tmp_path, "import sys; print('CUDA error: an illegal memory access'); sys.exit(3)", "crash.py")
    silent = script(tmp_path, "print('done, no figures')", "silent.py")
    env = configured(tmp_path, {"crash": {"argv": crash}, "silent": {"argv": silent}})

    crashed = run_check("training_step", {"workload": "crash"}, env)
    assert (crashed["status"], crashed["summary"]) == ("failed", "workload crash exited 3")
    assert "illegal memory access" in crashed["output"]
    quiet = run_check("training_step", {"workload": "silent"}, env)
    assert (quiet["status"], quiet["summary"]) == ("error", "workload silent printed no JSON line of figures on stdout")


def test_a_chatty_workloads_output_is_kept_to_its_tail_and_the_figures_still_read(tmp_path):
    argv = script(
        tmp_path,
        """
        import sys
        for _ in range(40_000):
            print("x" * 100)
            print("y" * 100, file=sys.stderr)
        print('{"samples_per_s": 1.0, "loss": 0.5}')
        """,
    )
    result = run_check("training_step", {"workload": "w"}, configured(tmp_path, {"w": {"argv": argv}}))

    assert result["status"] == "passed" and result["figures"]["samples_per_s"] == 1.0
    assert len(result["output"].encode()) <= OUTPUT_MAX_BYTES


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"argv": ["python3", "train.py"]}, "argv[0] must be an absolute path"),
        ({"argv": []}, "argv must be a non-empty list of strings"),
        ({"argv": "/bin/sh -c id"}, "argv must be a non-empty list of strings"),
        ({"argv": ["/usr/bin/python3"], "timeout_s": 0}, "timeout_s must be a number of seconds from 1 to 3600"),
        ({"argv": ["/usr/bin/python3"], "shell": True}, 'must be "builtin" or'),
        ("builtin", "no builtin workload by that name"),
    ],
)
def test_a_malformed_workload_entry_stops_the_agent_at_start(tmp_path, entry, message):
    with pytest.raises(ConfigError, match="NODEWARDEN_WORKLOADS") as raised:
        configured(tmp_path, {"llama-step": entry})
    assert message in str(raised.value)


def test_workloads_come_from_the_environment_as_json_too():
    config = load_config(
        env={"NODEWARDEN_WORKLOADS": '{"tiny-train": "builtin", "w": {"argv": ["/opt/w/run"], "timeout_s": 90}}'},
        require_portal=False,
    )
    assert config.workloads["tiny-train"] == BUILTIN_WORKLOADS["tiny-train"]
    assert config.workloads["w"].argv == ("/opt/w/run",) and config.workloads["w"].timeout_s == 90.0
    with pytest.raises(ConfigError, match="workload name 'Bad Name'"):
        load_config(env={"NODEWARDEN_WORKLOADS": '{"Bad Name": "builtin"}'}, require_portal=False)


def test_the_check_command_runs_a_workload_of_the_config_file(tmp_path, capsys):
    from nodewarden_agent.cli import main

    argv = script(tmp_path, 'print(\'{"samples_per_s": 42.0, "loss": 0.5}\')')
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"workloads": {"w": {"argv": argv}}}))

    code = main(["--config", str(path), "check", "training_step", "--params", '{"workload": "w"}'])

    result = json.loads(capsys.readouterr().out)
    assert (code, result["status"], result["figures"]["samples_per_s"]) == (0, "passed", 42.0)
