"""A check in a process group of its own, so that a preempted check dies with every tool it started.

The portal may take a running check back (the node's scheduler or customer wants the node:
``GET /api/agent/checks/<id>/`` answers ``wanted: false``). The check then has to stop within
seconds, including the dcgmi, all_reduce_perf or memory tester it started and the GPU threads of
the stress test. A forked child that calls ``setsid()`` is the leader of a new process group; the
tools it starts inherit the group, and ``killpg`` reaches them all.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from ..util import utc_iso
from . import CheckEnv, outcome, run_check

log = logging.getLogger(__name__)

KILL_GRACE_S = 5.0  # SIGTERM first (tools flush and exit), SIGKILL for what is left after this


def _child(kind: str, params: dict[str, Any], env: CheckEnv | None, send: Connection) -> None:
    os.setsid()  # a group of our own: the agent's killpg then reaches the tools this check starts
    send.send(run_check(kind, params, env))
    send.close()


class CheckProcess:
    """One check running in a forked child; ``wait`` for its result or ``kill`` it with its tools."""

    def __init__(self, kind: str, params: dict[str, Any], env: CheckEnv | None = None) -> None:
        # fork, not spawn: the check env (which tools, how to run them) goes along as it is.
        context = multiprocessing.get_context("fork")
        self._results, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_child, args=(kind, params, env, send), name=f"check-{kind}")
        self.started_at = utc_iso()
        self._process.start()
        send.close()  # the child holds the only writing end: its death closes the pipe

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def wait(self, timeout: float) -> dict[str, Any] | None:
        """The check's result once it finished (within ``timeout`` seconds), else None."""
        try:
            if self._results.poll(timeout):
                result: dict[str, Any] = self._results.recv()
                self._process.join()
                return result
        except EOFError:  # the child died before sending anything
            pass
        if self._process.is_alive():
            return None
        self._process.join()
        failed = outcome("error", f"the check process ended without a result (exit status {self._process.exitcode})")
        return {**failed, "started_at": self.started_at, "finished_at": utc_iso()}

    def kill(self, grace: float = KILL_GRACE_S) -> None:
        """SIGTERM to the check's whole process group, SIGKILL to whatever is left after ``grace``."""
        pid = self._process.pid
        if pid is None:
            return
        self._signal_group(pid, signal.SIGTERM)
        self._process.join(grace)
        self._signal_group(pid, signal.SIGKILL)  # a tool that ignored SIGTERM, or outlived its parent
        self._process.join(grace)
        self._results.close()

    def _signal_group(self, pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            # No group (yet, before setsid; or no longer): the child itself, if it still runs.
            if self._process.is_alive():
                os.kill(pid, sig)
        except PermissionError as exc:  # pid reused by another user's process: never touch it
            log.warning("could not signal check process group %s: %s", pid, exc)
