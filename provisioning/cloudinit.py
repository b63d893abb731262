"""cloud-init NoCloud data for a node's Day 0 boot, rendered from its BootConfig.

The node boots with ``ds=nocloud;s=<portal>/cloud-init/<instance_key>/`` on its kernel
command line and fetches meta-data, user-data and vendor-data (and, with recent
cloud-init, network-config) from there. Every document is built as a dict and dumped
with ``yaml.safe_dump``: no YAML is string-templated, so no hostname or endpoint can
inject keys.

The user-data writes the agent's config, installs the agent in a venv, runs
``nodewarden-agent join`` with the node's single-use join token and, only if that
join succeeds, enables the agent and joins the cluster's workload scheduler. The join
token (and, for Kubernetes, the bootstrap token issued with it) are the only secrets
in it; both expire. A node whose token is used, revoked or expired gets the same,
still valid user-data with that dead token: its join fails cleanly (409/410) and
nothing else runs. Re-issuing on fetch was rejected: anyone who learns the seed URL
could then mint live tokens at will. Re-provisioning is an operator's act
(``services.prepare_boot``).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any
from urllib.parse import urlsplit

import yaml
from django.conf import settings

from fleet.choices import SchedulerKind

from .models import BootConfig, JoinToken

AGENT_VENV = "/opt/nodewarden-agent"
AGENT_CONFIG = "/etc/nodewarden-agent/config.json"
AGENT_TOKEN_FILE = "/etc/nodewarden-agent/token"  # noqa: S105 - a file path
AGENT_UNIT = "/etc/systemd/system/nodewarden-agent.service"
KUBEADM_JOIN_CONFIG = "/etc/kubernetes/nodewarden-join.yaml"
SLURMD_DEFAULTS = "/etc/default/slurmd"
# kubeadm.k8s.io/v1beta3 is read by kubeadm 1.22 onwards, including releases that prefer v1beta4.
KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta3"
KUBERNETES_API_PORT = 6443
SLURMCTLD_PORT = 6817
# The provisioning interface's id in network-config (its name where the MAC is not found). Short:
# Linux names are at most 15 characters and the VLAN's is "<id>.<vlan>".
INTERFACE_ID = "prov0"
# Keeps workloads off the node until Day 1 validation clears it (removed at release to production).
LIFECYCLE_TAINT = {"key": "nodewarden.io/lifecycle", "value": "day0", "effect": "NoSchedule"}
_HOST_PORT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_SECRET_REF = re.compile(r"^[A-Za-z0-9_./:@+-]{1,255}$")


def portal_url() -> str:
    """NODEWARDEN_PORTAL_URL, else the project's PORTAL_URL, without a trailing slash."""
    url: str = settings.NODEWARDEN_PORTAL_URL or settings.PORTAL_URL
    return url.rstrip("/")


def seed_url(boot: BootConfig) -> str:
    # cloud-init appends "meta-data", "user-data"... to it: the trailing slash matters.
    return f"{portal_url()}/cloud-init/{boot.instance_key}/"


def kernel_cmdline(boot: BootConfig) -> str:
    """What the node's kernel command line carries for Day 0 (quote it in GRUB: the ';' ends a command)."""
    return " ".join(filter(None, [f"ds=nocloud;s={seed_url(boot)}", boot.kernel_cmdline_extra.strip()]))


def instance_id(boot: BootConfig) -> str:
    """Stable for one boot config and token generation; a new generation makes cloud-init run again."""
    return f"iid-nodewarden-{boot.pk}-{boot.generation}"


def current_join_token(boot: BootConfig) -> JoinToken | None:
    """The join token issued for the boot config's current generation, whatever its state."""
    return JoinToken.objects.filter(node_id=boot.node_id, generation=boot.generation).order_by("-created").first()


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)


# --- meta-data, vendor-data, network-config --------------------------------------------
def meta_data(boot: BootConfig) -> str:
    return _dump({"instance-id": instance_id(boot), "local-hostname": boot.node.hostname})


def vendor_data() -> str:
    """Nothing from the vendor: an empty, valid cloud-config (cloud-init logs a 404 as an error)."""
    return "#cloud-config\n{}\n"


def network_config(boot: BootConfig) -> str:
    return _dump(network_config_dict(boot))


def network_config_dict(boot: BootConfig) -> dict[str, Any]:
    """Network config version 2: the provisioning interface by MAC, static or DHCP, optionally on a VLAN."""
    ethernet: dict[str, Any] = {"match": {"macaddress": boot.interface_mac} if boot.interface_mac else {"name": "en*"}}
    if boot.mtu:
        ethernet["mtu"] = boot.mtu
    addressing = _addressing(boot)
    config: dict[str, Any] = {"version": 2, "ethernets": {INTERFACE_ID: ethernet}}
    if boot.vlan_id:
        ethernet.update({"dhcp4": False, "dhcp6": False})
        config["vlans"] = {f"{INTERFACE_ID}.{boot.vlan_id}": {"id": boot.vlan_id, "link": INTERFACE_ID, **addressing}}
    else:
        ethernet.update(addressing)
    return config


def _addressing(boot: BootConfig) -> dict[str, Any]:
    result: dict[str, Any] = {"dhcp4": True}
    interface = boot.interface
    if interface is not None:
        result = {"addresses": [str(interface)]}
        if boot.gateway:
            default = "0.0.0.0/0" if interface.version == 4 else "::/0"
            result["routes"] = [{"to": default, "via": boot.gateway}]
    if boot.dns_servers:
        result["nameservers"] = {"addresses": list(boot.dns_servers)}
    return result


# --- user-data ---------------------------------------------------------------------------
def user_data(boot: BootConfig, token: JoinToken) -> str:
    """The ``#cloud-config`` document: comments first (cloud-init ignores them), then the dict."""
    comments: list[str] = []
    document = user_data_dict(boot, token, comments)
    # split() also breaks on the line separators YAML knows (\x85, \u2028): a comment stays one line.
    header = "".join(f"# {' '.join(line.split())}\n" for line in comments)
    return f"#cloud-config\n{header}{_dump(document)}"


def user_data_dict(boot: BootConfig, token: JoinToken, comments: list[str]) -> dict[str, Any]:
    node = boot.node
    files = [_file(AGENT_CONFIG, _agent_config(node.hostname)), _file(AGENT_UNIT, _agent_unit())]
    after_join: list[str] = []
    cluster = node.cluster
    if cluster is not None and cluster.scheduler_kind == SchedulerKind.KUBERNETES:
        after_join = _kubernetes(cluster, node.hostname, token, files, comments)
    elif cluster is not None and cluster.scheduler_kind == SchedulerKind.SLURM:
        _slurm(cluster, files, comments)
    document: dict[str, Any] = {
        "hostname": node.hostname.split(".")[0],
        "preserve_hostname": False,
        "packages": ["python3-venv"],
        "write_files": files,
        "runcmd": [
            ["python3", "-m", "venv", AGENT_VENV],
            [f"{AGENT_VENV}/bin/pip", "install", "--quiet", agent_package()],
            [
                "sh",
                "-c",
                " && ".join(
                    [
                        shlex.join(_join_command(token)),
                        "systemctl daemon-reload",
                        "systemctl enable --now nodewarden-agent.service",
                        *after_join,
                    ]
                ),
            ],
        ],
    }
    if "." in node.hostname:
        document.update({"fqdn": node.hostname, "prefer_fqdn_over_hostname": True})
    return document


def agent_package() -> str:
    """NODEWARDEN_AGENT_PACKAGE: a pip requirement (name, pinned version, or wheel URL on a mirror)."""
    return str(settings.NODEWARDEN_AGENT_PACKAGE)


def _join_command(token: JoinToken) -> list[str]:
    return [
        f"{AGENT_VENV}/bin/nodewarden-agent",
        "--config",
        AGENT_CONFIG,
        "join",
        "--url",
        portal_url(),
        "--join-token",
        token.clear_token(),
    ]


def _file(path: str, content: str, permissions: str = "0644") -> dict[str, str]:
    return {"path": path, "content": content, "owner": "root:root", "permissions": permissions}


def _agent_config(hostname: str) -> str:
    config = {"url": portal_url(), "hostname": hostname, "token_file": AGENT_TOKEN_FILE}
    return json.dumps(config, indent=2) + "\n"


def _agent_unit() -> str:
    return "\n".join(
        [
            "[Unit]",
            "Description=Nodewarden node agent",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            f"Environment=NODEWARDEN_CONFIG={AGENT_CONFIG}",
            f"ExecStart={AGENT_VENV}/bin/nodewarden-agent run",
            "Restart=always",
            "StateDirectory=nodewarden-agent",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


# --- workload schedulers -----------------------------------------------------------------
def _endpoint(raw: str, default_port: int) -> str:
    """``host:port`` from a host, host:port or URL; "" if it is none of these."""
    raw = raw.strip()
    if "://" in raw:
        parts = urlsplit(raw)
        raw = parts.netloc
    if not _HOST_PORT.match(raw):
        return ""
    has_port = "]:" in raw if raw.startswith("[") else ":" in raw
    return raw if has_port else f"{raw}:{default_port}"


def kubernetes_ca_cert_hash(cluster: Any) -> str:
    """The cluster CA's public-key hash (``sha256:<hex>``): a cluster field if there is one, else
    NODEWARDEN_KUBERNETES_CA_CERT_HASHES[cluster name]; "" when unknown or malformed."""
    value = getattr(cluster, "kubernetes_ca_cert_hash", "") or settings.NODEWARDEN_KUBERNETES_CA_CERT_HASHES.get(
        cluster.name, ""
    )
    value = (value or "").strip().lower()
    return value if _CA_HASH.match(value) else ""


def _kubernetes(
    cluster: Any, hostname: str, token: JoinToken, files: list[dict[str, str]], comments: list[str]
) -> list[str]:
    """Write a kubeadm JoinConfiguration; return the command that joins, if the join can be verified.

    The CA hash pins the API server's CA (the config-file form of
    ``--discovery-token-ca-cert-hash``; kubeadm refuses ``--config`` mixed with flags, and only
    the file can set the lifecycle taint). Without it the file is written but kubeadm is not
    run: skipping CA verification would let anyone on the path pose as the API server.
    """
    endpoint = _endpoint(cluster.scheduler_endpoint, KUBERNETES_API_PORT)
    if not endpoint or not token.kubeadm_token_id:
        comments.append(
            f"Kubernetes: cluster {cluster.name} has no usable API server endpoint "
            f"({cluster.scheduler_endpoint!r}) or no bootstrap token; the node does not join it."
        )
        return []
    ca_hash = kubernetes_ca_cert_hash(cluster)
    discovery: dict[str, Any] = {"apiServerEndpoint": endpoint, "token": token.kubeadm_token()}
    if ca_hash:
        discovery["caCertHashes"] = [ca_hash]
    config = {
        "apiVersion": KUBEADM_API_VERSION,
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": discovery},
        "nodeRegistration": {"name": hostname, "taints": [LIFECYCLE_TAINT]},
    }
    note = (
        ""
        if ca_hash
        else (
            "# The cluster CA hash is not configured: set caCertHashes (sha256:...) here and run\n"
            f"# kubeadm join --config {KUBEADM_JOIN_CONFIG}. Never skip CA verification.\n"
        )
    )
    files.append(_file(KUBEADM_JOIN_CONFIG, note + _dump(config), permissions="0600"))
    if not ca_hash:
        comments.append(
            f"Kubernetes: no CA cert hash for cluster {cluster.name} (set "
            "NODEWARDEN_KUBERNETES_CA_CERT_HASHES); kubeadm join is written, not run."
        )
        return []
    return [shlex.join(["kubeadm", "join", "--config", KUBEADM_JOIN_CONFIG])]


def munge_key_ref() -> str:
    """NODEWARDEN_SLURM_MUNGE_KEY_REF: where the munge key comes from (a path or a secret's name).
    Never the key: the key is placed by the image or a secret store, not by user-data."""
    return str(settings.NODEWARDEN_SLURM_MUNGE_KEY_REF)


def _slurm(cluster: Any, files: list[dict[str, str]], comments: list[str]) -> None:
    """Configless Slurm: slurmd fetches slurm.conf from the controller. slurmd is not started at
    Day 0, so no job lands on a node before Day 1 validation has passed."""
    controller = _endpoint(cluster.scheduler_endpoint, SLURMCTLD_PORT)
    ref = munge_key_ref()
    if not controller or not _SECRET_REF.match(ref):
        comments.append(
            f"Slurm: cluster {cluster.name} has no usable controller ({cluster.scheduler_endpoint!r}) "
            "or munge key reference; no Slurm configuration written."
        )
        return
    content = "\n".join(
        [
            "# Written by Nodewarden at Day 0. slurmd starts once the node is released to production.",
            f"# The munge key is not shipped in user-data: it comes from {ref}.",
            f"SLURMD_OPTIONS={shlex.quote('--conf-server ' + controller)}",
            f"NODEWARDEN_MUNGE_KEY_REF={shlex.quote(ref)}",
            "",
        ]
    )
    files.append(_file(SLURMD_DEFAULTS, content))
