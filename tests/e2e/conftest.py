"""End-to-end fixtures: a node with simulated hardware running the real agent against the real portal.

The agent is the real package (agent/src, first on sys.path like tests/agent does), with
its real collectors, HTTP client and on-disk spool. Only the hardware that cannot exist
on a test machine is stood in for: NVML (``tests.agent.fakes.FakeNvml``, built from a real
H100's answers), the kernel log (a file of /dev/kmsg records), the InfiniBand sysfs tree,
/proc and EDAC (small folders with the kernel's file formats).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

AGENT_SRC = Path(__file__).resolve().parents[2] / "agent" / "src"
if str(AGENT_SRC) not in sys.path:
    sys.path.insert(0, str(AGENT_SRC))

from health import ruleconfig, xid
from nodes.choices import NodeState
from nodes.services import Actor
from nodewarden_agent.agent import Agent
from nodewarden_agent.checks import CheckEnv
from nodewarden_agent.client import PortalClient
from nodewarden_agent.collectors.host import HostCollector
from nodewarden_agent.collectors.infiniband import InfinibandCollector
from nodewarden_agent.collectors.kmsg import DevKmsgSource, KmsgCollector
from nodewarden_agent.collectors.nvml import NvmlCollector
from nodewarden_agent.config import Config
from telemetry.auth import forget_cached_tokens
from telemetry.services import issue_agent_token
from tests.agent.fakes import FakeNvml
from tests.factories import HardwareProfileFactory, NodeFactory

AGENT_FIXTURES = Path(__file__).resolve().parents[1] / "agent" / "fixtures"
HOSTNAME = "gpu-e2e-01.dc1.example.com"
BOOT_ID = "7c1f3b5e-0a55-4b55-9a8e-1f0d1e6a2b3c"
# The XID of the issue's "Done when", verbatim as the R550 driver prints it.
XID_79_LINE = "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_GPU = 3  # the fake NVML's GPU 3 sits at 00000000:53:00.0


@pytest.fixture(autouse=True)
def _fresh_process_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """Token, rule and XID lookups are cached per process, and the live server shares this process."""
    forget_cached_tokens()
    ruleconfig.invalidate_cache()  # the XID catalog and rules are re-seeded after each flush (health/seed.py)
    xid.invalidate_cache()
    yield
    forget_cached_tokens()
    ruleconfig.invalidate_cache()
    xid.invalidate_cache()


def healthy_h100_nvml() -> dict[str, Any]:
    """The captured H100 node's NVML answers with every fault taken out: 8 healthy GPUs."""
    data = json.loads((AGENT_FIXTURES / "nvml" / "h100-80gb-hbm3.json").read_text())
    gpus = []
    for gpu in data["gpus"]:
        if gpu.get("lost"):  # the capture's GPU 5 had fallen off; give the slot a healthy GPU
            gpu = {
                "uuid": "GPU-9f4d5a7c-1e3b-4c65-8a0a-4b6c8d0e2f54",
                "bus": "00000000:C3:00.0",
                "serial": "1653923004862",
                "temp": 28,
                "hbm_temp": 34,
                "power_mw": 69500,
            }
        keep = ("uuid", "bus", "serial", "temp", "hbm_temp", "power_mw")
        gpus.append({k: v for k, v in gpu.items() if k in keep})
    gpus[XID_GPU]["bus"] = "00000000:53:00.0"
    data["gpus"] = gpus
    return data


def write_ib_tree(root: Path) -> Path:
    """/sys/class/infiniband of an 8 x NDR node (tests/agent/fixtures/ib), every port up."""
    spec = json.loads((AGENT_FIXTURES / "ib" / "h100-8x-ndr.json").read_text())
    healthy_port = spec["devices"]["mlx5_0"]["ports"]["1"]
    for device in spec["devices"]:
        port_dir = root / device / "ports" / "1"
        for folder in ("counters", "hw_counters"):
            (port_dir / folder).mkdir(parents=True, exist_ok=True)
            for counter, value in healthy_port.get(folder, {}).items():
                (port_dir / folder / counter).write_text(f"{value}\n")
        for name, value in healthy_port.items():
            if name not in ("counters", "hw_counters"):
                (port_dir / name).write_text(f"{value}\n")
    return root


def write_host_tree(root: Path) -> tuple[Path, Path]:
    """A /proc with uptime, load and memory, and EDAC memory controllers with no errors."""
    proc = root / "proc"
    proc.mkdir(parents=True)
    (proc / "uptime").write_text("3600.47 55855.12\n")
    (proc / "loadavg").write_text("0.52 0.58 0.59 2/1633 3377447\n")
    (proc / "meminfo").write_text(
        "MemTotal:       2113645836 kB\nMemFree:        1998765432 kB\nMemAvailable:   2056789012 kB\n"
    )
    edac = root / "edac" / "mc"
    for mc in range(2):
        (edac / f"mc{mc}").mkdir(parents=True)
        (edac / f"mc{mc}" / "ce_count").write_text("0\n")
        (edac / f"mc{mc}" / "ue_count").write_text("0\n")
    return proc, edac


class SimulatedNode:
    """One GPU node's hardware and the agent's state folder; ``agent()`` starts (or restarts) its agent.

    The kernel log is a file of /dev/kmsg records read through the agent's own
    DevKmsgSource; its clock says the node booted an hour ago, so events are recent.
    """

    def __init__(self, root: Path, hostname: str):
        self.root, self.hostname = root, hostname
        self.state_dir = root / "state"
        self.nvml = FakeNvml(healthy_h100_nvml())
        self.ib_root = write_ib_tree(root / "infiniband")
        self.proc_root, self.edac_root = write_host_tree(root)
        self.kmsg = root / "kmsg"
        self.boot_time = time.time() - 3600
        self._kmsg_seq = 1200
        self.kernel_log("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024")

    def kernel_log(self, message: str, priority: int = 4) -> None:
        """Append one record as the kernel would expose it on /dev/kmsg: now, next seq."""
        self._kmsg_seq += 1
        usec = int((time.time() - self.boot_time) * 1e6)
        with self.kmsg.open("a") as handle:
            handle.write(f"{priority},{self._kmsg_seq},{usec},-;{message}\n")

    def lose_gpu(self, index: int) -> None:
        """NVML answers "GPU is lost" for this GPU from now on (what a fallen-off GPU looks like)."""
        self.nvml.data["gpus"][index] = {"lost": True}

    def collectors(self) -> list[Any]:
        self.state_dir.mkdir(exist_ok=True)
        source = DevKmsgSource(str(self.kmsg), boot_time=lambda: self.boot_time)
        return [
            NvmlCollector(self.nvml, expected_gpus=8),
            KmsgCollector(source, self.state_dir, boot_id=lambda: BOOT_ID),
            InfinibandCollector(self.ib_root),
            HostCollector(self.edac_root, self.proc_root, which=lambda name: None),  # no smartctl, no scheduler
        ]

    def agent(self, url: str, token: str, *, hostname: str | None = None, **settings: Any) -> Agent:
        """A freshly started agent process (same state folder: spool, seq and kmsg cursor survive)."""
        config = Config(
            url=url,
            token=token,
            state_dir=self.state_dir,
            hostname=hostname or self.hostname,
            expected_gpus=8,
            request_timeout_s=10,
            check_poll_cycles=1_000_000,
            **{"batch_size": 100, **settings},
        )
        # No DCGM on this simulated node; pinned rather than left to whatever this machine has.
        env = CheckEnv(which=lambda name: None)
        return Agent(config, self.collectors(), PortalClient(url, token, timeout=10), check_env=env)


@pytest.fixture
def node(db):
    """A production H100 node (8 GPUs expected by its hardware profile)."""
    return NodeFactory(hostname=HOSTNAME, state=NodeState.PRODUCTION, hardware_profile=HardwareProfileFactory())


@pytest.fixture
def agent_token(node) -> str:
    return issue_agent_token(node.pk, actor=Actor.system("tests"))


@pytest.fixture
def hardware(tmp_path) -> SimulatedNode:
    return SimulatedNode(tmp_path / "node", HOSTNAME)


@pytest.fixture
def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the portal is down)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def spooled(agent: Agent) -> list[dict[str, Any]]:
    """The reports waiting in the agent's on-disk spool, oldest first (copies)."""
    return [copy.deepcopy(report) for _, report in agent.spool.peek(10_000)]


class Portal:
    """Real HTTP to the live server as a person: a DRF token for /api/, a session cookie for pages."""

    def __init__(self, base_url: str, user: Any):
        from django.conf import settings
        from django.test import Client
        from rest_framework.authtoken.models import Token

        self.base_url = base_url.rstrip("/")
        self.token = Token.objects.get_or_create(user=user)[0].key
        browser = Client()
        browser.force_login(user)
        self.session = browser.cookies[settings.SESSION_COOKIE_NAME].value
        self.session_cookie = settings.SESSION_COOKIE_NAME

    def request(
        self, method: str, path: str, body: Any = None, *, page: bool = False, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """(status, decoded JSON or text) of one request; HTTP errors are answers, not exceptions."""
        import urllib.error
        import urllib.request

        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if page:
            headers["Cookie"] = f"{self.session_cookie}={self.session}"
        else:
            headers["Authorization"] = f"Token {self.token}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)  # noqa: S310 - the live server's http:// URL
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the Request above
                status, raw, kind = response.status, response.read(), response.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            status, raw, kind = exc.code, exc.read(), exc.headers.get_content_type()
        return status, json.loads(raw) if kind == "application/json" else raw.decode()

    def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kwargs)
