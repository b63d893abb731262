"""Fixtures for Day 0: nodes in each scheduler's cluster, provisioned through the real service."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from fleet.choices import SchedulerKind
from nodes.choices import NodeState
from nodes.services import Actor
from provisioning import services
from telemetry.auth import forget_cached_tokens
from tests.conftest import IN_CI
from tests.factories import ClusterFactory, NodeFactory

PORTAL = "https://nodewarden.example.com"
CA_HASH = "sha256:" + "ab" * 32
OPS = Actor.system("tests")


@pytest.fixture(autouse=True)
def _portal_settings() -> Iterator[None]:
    """A fixed portal URL in every seed, and no agent tokens cached across tests."""
    forget_cached_tokens()
    with override_settings(NODEWARDEN_PORTAL_URL=PORTAL):
        yield
    forget_cached_tokens()


@pytest.fixture
def node(db):
    """An enrolled node in a cluster without a workload scheduler."""
    return NodeFactory(
        hostname="gpu-a01.dc1.example.com",
        state=NodeState.ENROLLED,
        cluster=ClusterFactory(name="plain", scheduler_kind=SchedulerKind.NONE),
    )


@pytest.fixture
def slurm_node(db):
    return NodeFactory(
        hostname="gpu-s01",
        state=NodeState.ENROLLED,
        cluster=ClusterFactory(
            name="hpc", scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint="slurmctl01.dc1.example.com"
        ),
    )


@pytest.fixture
def k8s_node(db):
    return NodeFactory(
        hostname="gpu-k01.dc1.example.com",
        state=NodeState.ENROLLED,
        cluster=ClusterFactory(
            name="kube", scheduler_kind=SchedulerKind.KUBERNETES, scheduler_endpoint="https://10.20.0.10:6443"
        ),
    )


def provision(node, reason: str = "rack and stack done", **boot):  # type: ignore[no-untyped-def]
    """prepare_boot as an automation would call it; returns (boot config, clear join token)."""
    return services.prepare_boot(node.pk, actor=OPS, reason=reason, boot_config=boot or None)


@pytest.fixture
def api_as():
    def make(user):  # type: ignore[no-untyped-def]
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make


# --- cloud-init's own validators ---------------------------------------------------
def require_cloud_init() -> str:
    """The cloud-init command (Debian package cloud-init, which bin/test installs); skip or fail without it."""
    path = shutil.which("cloud-init")
    if path is None:
        message = "cloud-init is not installed (Debian package cloud-init; bin/test installs it)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    return path


def cloud_init_schema(path: Path) -> subprocess.CompletedProcess[str]:
    """``cloud-init schema --config-file``, cloud-init's own validator: rc 0 means valid."""
    require_cloud_init()
    return subprocess.run(
        ["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True, timeout=120
    )


# cloud-init 22.4 (Debian 12) has no network-config schema (``--schema-type`` came later, and
# even then v2 is only checked where netplan is installed), so network-config is also checked by
# cloud-init's own v2 parser, run by the interpreter cloud-init runs on.
_PARSE_NETWORK = """
import json, sys, yaml
from cloudinit.net.network_state import parse_net_config_data
state = parse_net_config_data(yaml.safe_load(open(sys.argv[1])), skip_broken=False)
print(json.dumps(list(state.iter_interfaces()), default=str))
"""


def validate_network_config(path: Path) -> tuple[bool, str]:
    """(valid, what cloud-init said): the network-config schema where this cloud-init checks it,
    and always its version 2 parser (which refuses bad addresses, routes and shapes)."""
    command = require_cloud_init()
    help_text = subprocess.run([command, "schema", "--help"], capture_output=True, text=True, timeout=60).stdout
    if "--schema-type" in help_text:
        done = subprocess.run(
            [command, "schema", "--schema-type", "network-config", "--config-file", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            return False, done.stdout + done.stderr
    interpreter = Path(command).read_text().splitlines()[0].removeprefix("#!").split()[0]
    done = subprocess.run([interpreter, "-c", _PARSE_NETWORK, str(path)], capture_output=True, text=True, timeout=120)
    return done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def api_client_anonymous() -> APIClient:
    return APIClient()
