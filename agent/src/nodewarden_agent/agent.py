"""The agent loop: collect -> spool -> flush in order -> now and then, run checks and commands.

Nothing leaves the spool until the portal has accepted it, so a restart at any point
resends instead of losing; ``report_id`` lets the portal drop the duplicates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .checks import CheckEnv
from .checks.isolated import CheckProcess
from .client import Backoff, PortalAuthError, PortalClient, PortalError, PortalRejected, PortalUnavailable
from .collectors import Collector
from .commands import CommandEnv, execute
from .config import Config
from .report import SeqCounter, build_report
from .spool import Spool
from .util import atomic_write_json, read_json

log = logging.getLogger(__name__)


class Agent:
    """One node's agent: owns the state folder, the spool and the portal connection."""

    def __init__(
        self,
        config: Config,
        collectors: Sequence[Collector],
        client: PortalClient | None = None,
        check_env: CheckEnv | None = None,
        command_env: CommandEnv | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config, self.collectors = config, list(collectors)
        state = Path(config.state_dir)
        self.spool = Spool(state / "spool", config.spool_max_reports, config.spool_max_bytes)
        self.seq = SeqCounter(state / "seq.json", floor=self.spool.last_seq())
        self.results_dir = state / "check-results"
        self.client = client
        self.backoff = Backoff(config.backoff_min_s, config.backoff_max_s, clock=clock)
        self.check_env = check_env or CheckEnv(workloads=config.workloads)
        self.commands_dir = state / "command-results"
        self.command_env = command_env or CommandEnv()
        self.cycles = 0
        self._check_thread: threading.Thread | None = None

    # --- collecting -------------------------------------------------------------------
    def collect(self) -> dict[str, Any]:
        """Take one report and put it in the spool; collector cursors move only after."""
        notice, drops = self.spool.drop_notice()
        report = build_report(
            self.config.hostname, self.seq.next(), self.collectors, extra_errors={"spool": notice} if notice else None
        )
        self.spool.append(report)
        if drops:
            self.spool.forget_drops(drops)
        for collector in self.collectors:
            try:
                collector.commit()
            except OSError as exc:  # the next cycle repeats these events rather than losing them
                log.error("collector %s could not save its cursor: %s", collector.name, exc)
        return report

    # --- sending ----------------------------------------------------------------------
    def flush(self) -> int:
        """Send spooled reports oldest first until the spool is empty or the portal fails.

        Returns how many reports left the spool (accepted or rejected)."""
        if self.client is None or not self.backoff.ready():
            return 0
        sent = 0
        while True:
            batch = self.spool.peek(self.config.batch_size)
            if not batch:
                return sent
            try:
                sent += self._send(batch)
            except (PortalUnavailable, PortalAuthError) as exc:
                delay = self.backoff.failed()
                level = logging.ERROR if isinstance(exc, PortalAuthError) else logging.WARNING
                log.log(
                    level,
                    "portal did not take %d reports (%s); %d waiting, retry in %.0f s",
                    len(batch),
                    exc,
                    len(self.spool),
                    delay,
                )
                return sent
            self.backoff.succeeded()

    def _send(self, batch: list[Any]) -> int:
        try:
            answer = self.client.post_reports([report for _, report in batch])
        except PortalRejected as exc:
            if len(batch) == 1:
                self._reject(batch[0][0], exc)
                return 1
            # Which report is bad? Resend one by one, in order, so only that one is set aside.
            return sum(self._send([item]) for item in batch)
        self.spool.remove([path for path, _ in batch])
        log.info("portal accepted %s, duplicates %s", answer.get("accepted"), answer.get("duplicates"))
        return len(batch)

    def _reject(self, path: Path, exc: PortalError) -> None:
        log.error(
            "PORTAL REJECTED report %s, moved to %s and never retried: %s", path.name, self.spool.rejected_dir, exc
        )
        self.spool.reject([path], str(exc))

    # --- active checks ----------------------------------------------------------------
    def poll_checks(self, wait: bool = False) -> None:
        """Send finished check results, then start the next check the portal hands out."""
        if self.client is None or (self._check_thread and self._check_thread.is_alive()):
            return
        if not self._post_results():
            return
        try:
            answer = self.client.fetch_checks()
        except PortalError as exc:
            log.warning("could not fetch checks: %s", exc)
            return
        checks = answer.get("checks") or []
        if not answer.get("idle") or not checks:
            return  # the portal only hands out checks while the node is idle
        self._check_thread = threading.Thread(target=self._run_checks, args=(checks,), name="checks", daemon=True)
        self._check_thread.start()
        if wait:
            self._check_thread.join()
            self._post_results()

    def _run_checks(self, checks: list[dict[str, Any]]) -> None:
        for check in checks:
            run_id = int(check["id"])
            wanted, why = self._still_wanted(run_id)
            if not wanted:  # preempted before it began (the scheduler wants the node): nothing to run
                log.warning("check %s no longer wanted, not started: %s", run_id, why)
                continue
            log.info("running check %s (%s)", run_id, check.get("kind"))
            result = self._run_watched(run_id, str(check.get("kind")), check.get("params") or {})
            if result is not None:
                # Kept on disk until the portal has it: a check result is not regenerated cheaply.
                atomic_write_json(self.results_dir / f"{run_id:012d}.json", result)

    def _run_watched(self, run_id: int, kind: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Run one check in its own process group, asking the portal every ``check_watch_s`` whether
        the run is still wanted; kill the group and return None (nothing to post) when it is not."""
        process = CheckProcess(kind, params, self.check_env)
        while True:
            result = process.wait(self.config.check_watch_s)
            if result is not None:
                return result
            wanted, why = self._still_wanted(run_id)
            if not wanted:
                log.warning("check %s preempted, killing its processes: %s", run_id, why)
                process.kill()
                return None

    def _still_wanted(self, run_id: int) -> tuple[bool, str]:
        """Whether the portal still wants the run; a portal that cannot answer lets the check go on
        (the run's deadline ends it, and a result for an unwanted run is acknowledged, not recorded)."""
        if self.client is None:
            return True, "no portal"
        try:
            answer = self.client.check_state(run_id)
        except PortalError as exc:
            log.warning("could not ask whether check %s is still wanted: %s", run_id, exc)
            return True, str(exc)
        return answer.get("wanted") is not False, str(answer.get("reason", ""))

    def _post_results(self) -> bool:
        """Post stored check results; False when the portal is not taking them now."""
        for path in sorted(self.results_dir.glob("[0-9]*.json")) if self.results_dir.is_dir() else []:
            result = read_json(path)
            try:
                self.client.post_check_result(int(path.stem), result)
            except PortalRejected as exc:
                log.error("PORTAL REJECTED result of check %s, dropped: %s", path.stem, exc)
            except PortalError as exc:
                log.warning("could not post result of check %s: %s", path.stem, exc)
                return False
            path.unlink(missing_ok=True)
        return True

    # --- commands -------------------------------------------------------------------------
    def poll_commands(self) -> int:
        """Send stored command results, take the portal's queued commands, run each, send its result.

        Returns how many commands ran. Each result is on disk before it is sent, so a command
        that reboots the node (or a portal that is down) still gets its result sent later."""
        if self.client is None or not self._post_command_results():
            return 0
        try:
            commands = self.client.fetch_commands().get("commands") or []
        except PortalError as exc:
            log.warning("could not fetch commands: %s", exc)
            return 0
        for command in commands:
            log.info("running command %s (%s %s)", command.get("id"), command.get("verb"), command.get("args"))
            result = execute(command, self.command_env)
            log.info("command %s %s: %s", command.get("id"), result["status"], result["summary"])
            atomic_write_json(self.commands_dir / f"{int(command['id']):012d}.json", result)
            self._post_command_results()
        return len(commands)

    def _post_command_results(self) -> bool:
        """Post stored command results; False when the portal is not taking them now."""
        for path in sorted(self.commands_dir.glob("[0-9]*.json")) if self.commands_dir.is_dir() else []:
            try:
                self.client.post_command_result(int(path.stem), read_json(path))
            except PortalError as exc:
                # 404 (not this node's command any more) and 409 (never delivered) cannot succeed later either.
                if not isinstance(exc, PortalRejected) and exc.status not in (404, 409):
                    log.warning("could not post result of command %s: %s", path.stem, exc)
                    return False
                log.error("PORTAL REJECTED result of command %s, dropped: %s", path.stem, exc)
            path.unlink(missing_ok=True)
        return True

    # --- the loop ---------------------------------------------------------------------
    def cycle(self) -> None:
        self.collect()
        self.flush()
        self.cycles += 1
        if self.cycles % self.config.check_poll_cycles == 0 and len(self.spool) == 0:
            self.poll_commands()
            self.poll_checks()

    def run_forever(self, stop: threading.Event) -> None:
        """Cycle every ``interval_s`` until ``stop`` is set (SIGTERM in the CLI)."""
        log.info(
            "nodewarden-agent reporting to %s every %.0f s as %s",
            self.config.url,
            self.config.interval_s,
            self.config.hostname,
        )
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:
                log.exception("cycle failed")
            stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - started)))
