"""BootConfig validation names the bad field; JoinToken keeps only a hash and derives the token."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from provisioning.models import BootConfig, JoinToken
from provisioning.tokens import hash_token, join_token_for, kubeadm_token_for
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def boot(**fields) -> BootConfig:  # type: ignore[no-untyped-def]
    return BootConfig(node=NodeFactory(), **fields)


def errors_of(config: BootConfig) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        config.full_clean()
    return caught.value.message_dict


STATIC = {"interface_mac": "3c:ec:ef:12:34:56", "ip_address": "10.1.2.3", "prefix_length": 24}


def test_a_dhcp_config_needs_nothing_but_the_node():
    boot().full_clean()


def test_a_static_config_is_valid_and_the_mac_is_normalised():
    config = boot(
        **{**STATIC, "interface_mac": "3C-EC-EF-12-34-56"},
        gateway="10.1.2.1",
        dns_servers=["10.0.0.53"],
        mtu=9000,
        vlan_id=42,
    )
    config.full_clean()
    assert config.interface_mac == "3c:ec:ef:12:34:56"
    assert str(config.interface) == "10.1.2.3/24"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"interface_mac": "3c:ec:ef:12:34"}, "interface_mac", "is not a MAC address"),
        ({"interface_mac": "zz:ec:ef:12:34:56"}, "interface_mac", "is not a MAC address"),
        ({"interface_mac": "3c:ec-ef:12:34:56"}, "interface_mac", "is not a MAC address"),
        ({**STATIC, "ip_address": "10.1.2.300"}, "ip_address", "valid IPv4 or IPv6 address"),
        ({**STATIC, "gateway": "not-an-ip"}, "gateway", "valid IPv4 or IPv6 address"),
        ({**STATIC, "prefix_length": 33}, "prefix_length", "1 to 32"),
        ({**STATIC, "prefix_length": None}, "prefix_length", "Required with a static IPv4 address"),
        ({"prefix_length": 24}, "ip_address", "Required with a prefix length"),
        ({**STATIC, "interface_mac": ""}, "interface_mac", "Required with a static address"),
        ({**STATIC, "gateway": "10.9.9.1"}, "gateway", "is not in the node's network 10.1.2.0/24"),
        ({**STATIC, "gateway": "fd00::1"}, "gateway", "is not in the node's network"),
        ({**STATIC, "gateway": "10.1.2.3"}, "gateway", "cannot be the node's own address"),
        ({"gateway": "10.1.2.1"}, "gateway", "needs a static IP address"),
        ({"dns_servers": "10.0.0.53"}, "dns_servers", "Must be a list"),
        ({"dns_servers": ["10.0.0.53", "dns.example.com"]}, "dns_servers", "Item 1: 'dns.example.com' is not an IP"),
        ({"dns_servers": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]}, "dns_servers", "At most 3"),
        ({"mtu": 100}, "mtu", "greater than or equal to 576"),
        ({"vlan_id": 4095}, "vlan_id", "less than or equal to 4094"),
        ({"kernel_cmdline_extra": "console=ttyS0 ds=nocloud-net"}, "kernel_cmdline_extra", "ds= datasource"),
        ({"kernel_cmdline_extra": "quiet\nds=x"}, "kernel_cmdline_extra", "control characters"),
        ({"boot_image_url": "not a url"}, "boot_image_url", "valid URL"),
    ],
)
def test_a_bad_field_is_a_validation_error_naming_it(fields, field, message):
    errors = errors_of(boot(**fields))
    assert message in " ".join(errors[field]), errors


def test_ipv6_static_addresses_are_checked_against_their_own_family():
    boot(
        interface_mac="3c:ec:ef:12:34:56", ip_address="fd00:10::5", prefix_length=64, gateway="fd00:10::1"
    ).full_clean()
    errors = errors_of(boot(interface_mac="3c:ec:ef:12:34:56", ip_address="fd00:10::5", prefix_length=129))
    assert "1 to 128" in errors["prefix_length"][0]


def test_a_kernel_parameter_that_merely_ends_in_ds_is_allowed():
    boot(kernel_cmdline_extra="console=ttyS0,115200 modprobe.blacklist=nouveau rd.driver.pre=ids=1").full_clean()


def test_instance_keys_are_long_random_and_url_safe():
    keys = {boot().instance_key for _ in range(20)}
    assert len(keys) == 20
    assert all(len(key) >= 43 and key.replace("-", "").replace("_", "").isalnum() for key in keys)


def test_the_join_token_is_derived_from_its_salt_and_only_its_hash_is_stored(settings):
    token = join_token_for("a" * 32)
    assert token.startswith("nwj_") and len(token) == 4 + 43
    assert join_token_for("a" * 32) == token, "the same salt gives the same token"
    assert join_token_for("b" * 32) != token
    settings.SECRET_KEY = "another key"
    assert join_token_for("a" * 32) != token, "without the portal's SECRET_KEY the salt is worthless"
    stored = {f.name for f in JoinToken._meta.get_fields()}
    assert "key_hash" in stored and not {"token", "key", "clear_token"} & stored
    assert len(hash_token(token)) == 64


def test_kubeadm_bootstrap_tokens_have_kubeadms_format():
    token = kubeadm_token_for("abc123", "f" * 32)
    token_id, secret = token.split(".")
    assert token_id == "abc123" and len(secret) == 16
    assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789" for c in secret)
