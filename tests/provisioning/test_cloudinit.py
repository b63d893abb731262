"""The NoCloud documents, checked by cloud-init's own validators and for what they must never hold."""

from __future__ import annotations

import json

import pytest
import yaml

from fleet.choices import SchedulerKind
from provisioning import cloudinit
from provisioning.models import JoinToken
from tests.factories import ClusterFactory, NodeFactory

from .conftest import CA_HASH, PORTAL, cloud_init_schema, provision, validate_network_config

pytestmark = pytest.mark.django_db


def rendered(node, **boot):  # type: ignore[no-untyped-def]
    config, token = provision(node, **boot)
    return config, token, cloudinit.user_data(config, cloudinit.current_join_token(config))


def loaded(user_data: str) -> dict:
    assert user_data.startswith("#cloud-config\n")
    return yaml.safe_load(user_data)


def files_of(document: dict) -> dict[str, dict]:
    return {f["path"]: f for f in document["write_files"]}


def join_line(document: dict) -> str:
    return document["runcmd"][-1][2]


# --- cloud-init's schema validator ------------------------------------------------------------
@pytest.mark.parametrize("kind", [SchedulerKind.SLURM, SchedulerKind.KUBERNETES, SchedulerKind.NONE])
@pytest.mark.parametrize("ca_hash", ["", CA_HASH])
def test_user_data_for_every_scheduler_passes_cloud_inits_schema(tmp_path, settings, kind, ca_hash):
    cluster = ClusterFactory(scheduler_kind=kind, scheduler_endpoint="ctl01.dc1.example.com")
    settings.NODEWARDEN_KUBERNETES_CA_CERT_HASHES = {cluster.name: ca_hash}
    _, _, user_data = rendered(
        NodeFactory(hostname="gpu-x01.dc1.example.com", state="enrolled", cluster=cluster),
        interface_mac="3c:ec:ef:12:34:56",
        ip_address="10.1.2.3",
        prefix_length=24,
    )
    path = tmp_path / "user-data"
    path.write_text(user_data)

    done = cloud_init_schema(path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Valid cloud-config" in done.stdout


def test_the_schema_validator_does_fail_a_broken_document(tmp_path, node):
    """The check above can fail: runcmd must be a list, write_files entries need a path."""
    _, _, user_data = rendered(node)
    document = loaded(user_data)
    document["runcmd"] = "nodewarden-agent join"
    document["write_files"][0].pop("path")
    path = tmp_path / "user-data"
    path.write_text("#cloud-config\n" + yaml.safe_dump(document))

    done = cloud_init_schema(path)

    assert done.returncode != 0
    assert "runcmd" in done.stdout + done.stderr


def test_vendor_data_is_empty_but_valid(tmp_path):
    path = tmp_path / "vendor-data"
    path.write_text(cloudinit.vendor_data())
    assert cloud_init_schema(path).returncode == 0
    assert yaml.safe_load(cloudinit.vendor_data()) == {}


# --- network-config ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("boot", "expected"),
    [
        ({}, {"name": "prov0", "subnets": ["dhcp4"]}),
        (
            {
                "interface_mac": "3c:ec:ef:12:34:56",
                "ip_address": "10.1.2.3",
                "prefix_length": 24,
                "gateway": "10.1.2.1",
                "dns_servers": ["10.0.0.53"],
                "mtu": 9000,
            },
            {"name": "prov0", "subnets": ["static"], "mtu": 9000},
        ),
        (
            {
                "interface_mac": "3c:ec:ef:12:34:56",
                "ip_address": "fd00:10::5",
                "prefix_length": 64,
                "gateway": "fd00:10::1",
            },
            {"name": "prov0", "subnets": ["static"]},
        ),
        (
            {
                "interface_mac": "3c:ec:ef:12:34:56",
                "ip_address": "10.1.2.3",
                "prefix_length": 24,
                "gateway": "10.1.2.1",
                "vlan_id": 4094,
            },
            {"name": "prov0.4094", "subnets": ["static"], "vlan_id": 4094},
        ),
    ],
)
def test_network_config_is_version_2_and_cloud_init_parses_it(tmp_path, node, boot, expected):
    config, _ = provision(node, **boot)
    path = tmp_path / "network-config"
    path.write_text(cloudinit.network_config(config))

    valid, output = validate_network_config(path)

    assert valid, output
    interfaces = {i["name"]: i for i in json.loads(output.strip().splitlines()[-1])}
    got = interfaces[expected["name"]]
    assert [s["type"] for s in got["subnets"]] == expected["subnets"], got
    assert all(got.get(key) == value for key, value in expected.items() if key not in ("name", "subnets"))
    if boot.get("ip_address"):
        assert got["subnets"][0]["address"] == boot["ip_address"]
    assert len(expected["name"]) <= 15, "Linux interface names are at most 15 characters"


def test_the_network_validator_does_fail_a_broken_config(tmp_path):
    path = tmp_path / "network-config"
    path.write_text(yaml.safe_dump({"version": 2, "ethernets": {"prov0": {"addresses": ["10.1.2.300/24"]}}}))
    valid, output = validate_network_config(path)
    assert not valid and "10.1.2.300" in output


def test_the_static_address_is_on_the_interface_with_that_mac(node):
    config, _ = provision(
        node,
        interface_mac="3c:ec:ef:12:34:56",
        ip_address="10.1.2.3",
        prefix_length=24,
        gateway="10.1.2.1",
        dns_servers=["10.0.0.53", "10.0.1.53"],
    )
    network = yaml.safe_load(cloudinit.network_config(config))
    assert network == {
        "version": 2,
        "ethernets": {
            "prov0": {
                "match": {"macaddress": "3c:ec:ef:12:34:56"},
                "addresses": ["10.1.2.3/24"],
                "routes": [{"to": "0.0.0.0/0", "via": "10.1.2.1"}],
                "nameservers": {"addresses": ["10.0.0.53", "10.0.1.53"]},
            }
        },
    }


# --- meta-data, kernel command line -----------------------------------------------------------
def test_meta_data_names_the_instance_and_host_and_changes_with_each_generation(node):
    config, _ = provision(node)
    first = yaml.safe_load(cloudinit.meta_data(config))
    config, _ = provision(node)
    second = yaml.safe_load(cloudinit.meta_data(config))
    assert first == {"instance-id": f"iid-nodewarden-{config.pk}-1", "local-hostname": node.hostname}
    assert second["instance-id"] == f"iid-nodewarden-{config.pk}-2"


def test_the_kernel_command_line_points_nocloud_at_the_seed(node):
    config, _ = provision(node, kernel_cmdline_extra="console=ttyS0,115200")
    assert cloudinit.seed_url(config) == f"{PORTAL}/cloud-init/{config.instance_key}/"
    assert cloudinit.kernel_cmdline(config) == (
        f"ds=nocloud;s={PORTAL}/cloud-init/{config.instance_key}/ console=ttyS0,115200"
    )


def test_without_the_setting_the_portal_url_is_the_projects_own(node, settings):
    settings.NODEWARDEN_PORTAL_URL = ""  # the default: PORTAL_URL
    settings.PORTAL_URL = "http://portal.internal:8000/"
    config, _ = provision(node)
    assert cloudinit.seed_url(config).startswith("http://portal.internal:8000/cloud-init/")


# --- user-data: the agent ---------------------------------------------------------------------
def test_user_data_configures_installs_and_joins_the_agent_then_enables_it(node, settings):
    settings.NODEWARDEN_AGENT_PACKAGE = "nodewarden-agent==0.1.0"
    _, token, user_data = rendered(node)
    document = loaded(user_data)

    config = files_of(document)["/etc/nodewarden-agent/config.json"]
    assert yaml.safe_load(config["content"]) == {
        "url": PORTAL,
        "hostname": node.hostname,
        "token_file": "/etc/nodewarden-agent/token",
    }
    assert (
        "NODEWARDEN_CONFIG=/etc/nodewarden-agent/config.json"
        in files_of(document)["/etc/systemd/system/nodewarden-agent.service"]["content"]
    )
    assert document["runcmd"][:2] == [
        ["python3", "-m", "venv", "/opt/nodewarden-agent"],
        ["/opt/nodewarden-agent/bin/pip", "install", "--quiet", "nodewarden-agent==0.1.0"],
    ]
    assert join_line(document) == (
        "/opt/nodewarden-agent/bin/nodewarden-agent --config /etc/nodewarden-agent/config.json join "
        f"--url {PORTAL} --join-token {token} && systemctl daemon-reload "
        "&& systemctl enable --now nodewarden-agent.service"
    )
    assert (document["hostname"], document["fqdn"]) == ("gpu-a01", node.hostname)


def test_user_data_holds_no_secret_but_the_join_token(node):
    _, token, user_data = rendered(node)
    stored = JoinToken.objects.get(node=node)
    assert user_data.count(token) == 1
    for secret in (stored.key_hash, stored.salt):
        assert secret not in user_data
    assert "nwa_" not in user_data, "never an agent token"


def test_a_used_token_still_renders_valid_user_data_whose_join_will_fail(tmp_path, node):
    from provisioning import services

    config, token = provision(node)
    services.join(token, hostname=node.hostname, agent_facts={})
    user_data = cloudinit.user_data(config, cloudinit.current_join_token(config))
    assert token in user_data, "the same (now used) token: the join answers 409 and nothing else runs"
    path = tmp_path / "user-data"
    path.write_text(user_data)
    assert cloud_init_schema(path).returncode == 0


def test_hostile_inventory_values_cannot_inject_yaml(settings):
    cluster = ClusterFactory(
        name="evil\nruncmd: [[rm, -rf, /]]",
        scheduler_kind=SchedulerKind.KUBERNETES,
        scheduler_endpoint="x\nbootcmd: [[reboot]]",
    )
    node = NodeFactory(hostname="gpu-e01\nbootcmd: [[halt]]", state="enrolled", cluster=cluster)
    document = loaded(rendered(node)[2])
    assert "bootcmd" not in document and len(document["runcmd"]) == 3
    assert "/etc/kubernetes/nodewarden-join.yaml" not in files_of(document)


# --- user-data: the workload scheduler ----------------------------------------------------------
def test_kubernetes_with_a_ca_hash_joins_with_a_pinned_ca_and_a_lifecycle_taint(k8s_node, settings):
    settings.NODEWARDEN_KUBERNETES_CA_CERT_HASHES = {"kube": CA_HASH}
    _, _, user_data = rendered(k8s_node)
    document = loaded(user_data)
    stored = JoinToken.objects.get(node=k8s_node)

    join_config = yaml.safe_load(files_of(document)["/etc/kubernetes/nodewarden-join.yaml"]["content"])
    assert files_of(document)["/etc/kubernetes/nodewarden-join.yaml"]["permissions"] == "0600"
    assert join_config["kind"] == "JoinConfiguration"
    assert join_config["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "10.20.0.10:6443",
        "token": stored.kubeadm_token(),
        "caCertHashes": [CA_HASH],
    }
    assert join_config["nodeRegistration"] == {
        "name": k8s_node.hostname,
        "taints": [{"key": "nodewarden.io/lifecycle", "value": "day0", "effect": "NoSchedule"}],
    }
    assert join_line(document).endswith(
        "nodewarden-agent.service && kubeadm join --config /etc/kubernetes/nodewarden-join.yaml"
    ), "kubeadm runs only after the agent joined"
    assert "unsafe-skip" not in user_data.lower() and "unsafeSkipCAVerification" not in user_data
    assert stored.kubeadm_secret_hash not in user_data


def test_kubernetes_without_a_ca_hash_writes_the_join_config_but_never_joins_unverified(k8s_node):
    _, _, user_data = rendered(k8s_node)
    document = loaded(user_data)
    content = files_of(document)["/etc/kubernetes/nodewarden-join.yaml"]["content"]
    assert content.startswith("# The cluster CA hash is not configured")
    assert "caCertHashes" not in yaml.safe_load(content)["discovery"]["bootstrapToken"]
    assert "kubeadm" not in join_line(document)
    assert "# Kubernetes: no CA cert hash for cluster kube" in user_data.splitlines()[1]
    assert "unsafe-skip" not in user_data.lower()


def test_a_malformed_ca_hash_counts_as_none(k8s_node, settings):
    settings.NODEWARDEN_KUBERNETES_CA_CERT_HASHES = {"kube": "sha256:not-hex"}
    assert "kubeadm" not in join_line(loaded(rendered(k8s_node)[2]))


def test_slurm_gets_its_controller_and_a_munge_key_reference_never_the_key(slurm_node, settings):
    settings.NODEWARDEN_SLURM_MUNGE_KEY_REF = "vault:secret/slurm/hpc/munge"
    _, _, user_data = rendered(slurm_node)
    document = loaded(user_data)
    slurmd = files_of(document)["/etc/default/slurmd"]["content"]
    assert "SLURMD_OPTIONS='--conf-server slurmctl01.dc1.example.com:6817'" in slurmd.splitlines()
    assert "NODEWARDEN_MUNGE_KEY_REF=vault:secret/slurm/hpc/munge" in slurmd.splitlines()
    assert "slurmd" not in join_line(document), "slurmd starts at release to production, not at Day 0"


def test_slurm_refuses_a_munge_key_reference_that_looks_like_key_material(slurm_node, settings):
    settings.NODEWARDEN_SLURM_MUNGE_KEY_REF = "\x8f\x01 raw key bytes\n"
    _, _, user_data = rendered(slurm_node)
    assert "/etc/default/slurmd" not in files_of(loaded(user_data))
    assert "raw key bytes" not in user_data


@pytest.mark.parametrize(
    ("raw", "port", "expected"),
    [
        ("ctl01", 6817, "ctl01:6817"),
        ("ctl01:7000", 6817, "ctl01:7000"),
        ("https://api.k8s.example.com", 6443, "api.k8s.example.com:6443"),
        ("https://10.0.0.1:6443/", 6443, "10.0.0.1:6443"),
        ("[fd00::1]", 6443, "[fd00::1]:6443"),
        ("[fd00::1]:8443", 6443, "[fd00::1]:8443"),
        ("", 6443, ""),
        ("ctl01; reboot", 6817, ""),
    ],
)
def test_scheduler_endpoints_become_host_and_port(raw, port, expected):
    assert cloudinit._endpoint(raw, port) == expected
