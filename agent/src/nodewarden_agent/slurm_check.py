"""``nodewarden-slurm-check``: refuse Slurm work on a node Nodewarden has out of production.

Belt and braces for sites that want it: Nodewarden already drains the node in Slurm itself
(``schedulers.slurm``); this hook asks the portal, with the node's agent token, for the node's
lifecycle state (``GET /api/agent/state/``) where Slurm starts a job or checks a node's health.

- As a ``Prolog=`` (runs as root on the node before each job): exit 1 when the node is out of
  production; Slurm then refuses the job on this node (it requeues it and drains the node).
- As a ``HealthCheckProgram=`` (``--drain``): Slurm ignores the exit status of a health check, so the
  script drains the node itself (``scontrol update nodename=<host> state=drain reason="nodewarden:
  <state>: <reason>"``; the "nodewarden:" prefix makes it Nodewarden's drain, lifted on return).

Exit codes: 0 in production (or portal unreachable, unless ``--fail-closed``); 1 out of production;
2 configuration error (no URL or token); 3 portal unreachable with ``--fail-closed``. A portal
outage must not stop every job of the cluster, so by default the hook fails open and says so on
stderr (Slurm logs a prolog's stderr in slurmd.log).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from .client import PortalClient, PortalError
from .config import ConfigError, load_config

IN_PRODUCTION, OUT, CONFIG, UNREACHABLE = 0, 1, 2, 3
TIMEOUT_S = 10.0  # a prolog holds the job's start: keep the question short


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nodewarden-slurm-check", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="JSON config file (as nodewarden-agent's)")
    parser.add_argument("--drain", action="store_true", help="HealthCheckProgram: drain the node with scontrol")
    parser.add_argument("--fail-closed", action="store_true", help="refuse work when the portal cannot be asked")
    parser.add_argument("--scontrol", default="scontrol", help="scontrol to run for --drain")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds to wait for the portal")
    return parser.parse_args(argv)


def ask_portal(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The portal's answer for this node, and the node's short name for scontrol."""
    config = load_config(config_file=args.config, require_portal=False)
    token = config.token
    if not token and (config.state_dir / "token").is_file():  # where ``nodewarden-agent join`` wrote it
        token = Path(config.state_dir / "token").read_text().strip()
    if not (config.url and token):
        raise ConfigError("NODEWARDEN_URL and NODEWARDEN_TOKEN (or NODEWARDEN_TOKEN_FILE) are required")
    answer = PortalClient(config.url, token, timeout=args.timeout).agent_state()
    return answer, config.hostname.split(".", 1)[0]


def drain(args: argparse.Namespace, name: str, reason: str) -> None:
    reason = " ".join(f"nodewarden: {reason}".split())[:200]
    subprocess.run(
        [args.scontrol, "update", f"nodename={name}", "state=drain", f"reason={reason}"],
        check=False,
        timeout=30,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        answer, name = ask_portal(args)
    except ConfigError as exc:
        print(f"nodewarden-slurm-check: {exc}", file=sys.stderr)
        return CONFIG
    except PortalError as exc:
        print(f"nodewarden-slurm-check: the portal could not be asked: {exc}", file=sys.stderr)
        return UNREACHABLE if args.fail_closed else IN_PRODUCTION
    if answer.get("in_production", False):
        return IN_PRODUCTION
    state = str(answer.get("state", "unknown"))
    why = str(answer.get("reason") or state)
    print(f"nodewarden-slurm-check: Nodewarden has this node out of production: {why}", file=sys.stderr)
    if args.drain:
        drain(args, name, why)
    return OUT


if __name__ == "__main__":
    sys.exit(main())
