"""``nodewarden-agent``: run the loop, take one report, or run one check locally.

nodewarden-agent run                  # the service (systemd unit in agent/README.md)
nodewarden-agent once --print         # collect one report, print it, send nothing
nodewarden-agent once                 # collect one report, spool it and flush
nodewarden-agent check gpu_stress --params '{"seconds": 30}'
nodewarden-agent join --url URL --join-token nwj_...   # first boot: get this node's token
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from . import __version__, join
from .agent import Agent
from .checks import KINDS, CheckEnv, run_check
from .client import PortalClient
from .collectors.host import HostCollector
from .collectors.infiniband import InfinibandCollector
from .collectors.kmsg import KmsgCollector, default_source
from .collectors.nvml import NvmlCollector
from .config import Config, ConfigError, load_config
from .report import build_report

log = logging.getLogger("nodewarden_agent")


def default_collectors(config: Config, kmsg_state: Path | None = None) -> list[Any]:
    """The production collectors; the kernel log one only when a source can be opened."""
    collectors: list[Any] = [NvmlCollector(expected_gpus=config.expected_gpus), InfinibandCollector(), HostCollector()]
    state = kmsg_state or Path(config.state_dir)
    try:
        collectors.insert(1, KmsgCollector(default_source(state), state))
    except Exception as exc:  # reported below, in every report
        collectors.insert(1, _Unavailable("kmsg", str(exc)))
    return collectors


class _Unavailable:
    """Stands in for a collector whose source could not be opened at start."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason

    def collect(self) -> Any:
        raise RuntimeError(self.reason)

    def commit(self) -> None:
        """Nothing to move."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodewarden-agent", description="Nodewarden node agent")
    parser.add_argument("--config", help="JSON config file (env NODEWARDEN_* settings override it)")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="report every interval until stopped")
    once = commands.add_parser("once", help="collect one report")
    once.add_argument("--print", action="store_true", help="print the report as JSON and send nothing")
    check = commands.add_parser("check", help="run one active check here and print its result")
    check.add_argument("kind", choices=KINDS)
    check.add_argument("--params", default="{}", help="check params as a JSON object")
    joiner = commands.add_parser("join", help="trade a single-use join token for this node's agent token")
    joiner.add_argument("--url", help="portal base URL (default: NODEWARDEN_URL)")
    joiner.add_argument("--join-token", required=True, help="the nwj_... token from the node's user-data")
    joiner.add_argument("--state-dir", help="the token goes to <state dir>/token unless a token file is set")
    joiner.add_argument("--token-file", help="where to write the agent token (default: NODEWARDEN_TOKEN_FILE)")
    joiner.add_argument(
        "--wait",
        type=float,
        default=300.0,
        help="seconds to keep retrying while the portal cannot be reached (default 300)",
    )
    return parser


def _run(config: Config) -> int:
    agent = Agent(config, default_collectors(config), PortalClient(config.url, config.token, config.request_timeout_s))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    agent.run_forever(stop)
    return 0


def _once(config: Config, print_only: bool) -> int:
    if print_only:
        # A throw-away kmsg cursor: printing must not move the service's resume point.
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            report = build_report(config.hostname, 0, default_collectors(config, Path(scratch)))
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    client = PortalClient(config.url, config.token, config.request_timeout_s)
    agent = Agent(config, default_collectors(config), client)
    agent.collect()
    agent.flush()
    waiting = len(agent.spool)
    print(f"{waiting} reports waiting in {agent.spool.directory}" if waiting else "report sent")
    return 1 if waiting else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "join":  # before load_config: the token file it reads does not exist yet
        return join.run(args, sys.stdout, sys.stderr)
    try:
        portal_needed = args.command == "run" or (args.command == "once" and not args.print)
        config = load_config(config_file=args.config, require_portal=portal_needed)
    except ConfigError as exc:
        print(f"nodewarden-agent: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "run":
        return _run(config)
    if args.command == "once":
        return _once(config, args.print)
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        print(f"nodewarden-agent: --params is not JSON: {exc}", file=sys.stderr)
        return 2
    # The check sees the workloads of this node's config, as under the service loop.
    result = run_check(args.kind, params, CheckEnv(workloads=config.workloads))
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0 if result["status"] in ("passed", "not_available") else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
