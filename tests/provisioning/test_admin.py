"""Admin: boot configs are edited (never created) there; join tokens are read-only but revocable."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from nodes.models import NodeEvent
from provisioning.models import JoinToken

from .conftest import provision

pytestmark = pytest.mark.django_db
TOKENS = "/admin/provisioning/jointoken/"


@pytest.fixture
def admin_client(client, fleet_admin):
    client.force_login(fleet_admin)
    return client


def test_the_join_token_list_shows_prefixes_never_hashes_or_salts(admin_client, node):
    _, token = provision(node)
    stored = JoinToken.objects.get(node=node)
    pages = [admin_client.get(TOKENS), admin_client.get(f"{TOKENS}{stored.pk}/change/")]
    for page in pages:
        assert page.status_code == 200
        body = page.content.decode()
        assert stored.prefix in body
        assert token not in body and stored.key_hash not in body and stored.salt not in body


def test_revoking_asks_for_a_reason_then_revokes_and_records_it(admin_client, node):
    provision(node)
    stored = JoinToken.objects.get(node=node)
    form = {"action": "revoke_action", ACTION_CHECKBOX_NAME: [stored.pk]}

    page = admin_client.post(TOKENS, form)
    assert page.status_code == 200 and b"reason" in page.content
    stored.refresh_from_db()
    assert stored.revoked_at is None

    done = admin_client.post(TOKENS, {**form, "apply": "1", "reason": "seed URL pasted in a ticket"}, follow=True)
    assert b"Revoked 1 join token(s)." in done.content
    stored.refresh_from_db()
    assert stored.revoked_at is not None
    assert NodeEvent.objects.filter(node=node, reason="seed URL pasted in a ticket").exists()


def test_a_viewer_may_look_but_not_revoke(client, viewer, node):
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_jointoken"))
    client.force_login(viewer)
    provision(node)
    page = client.get(TOKENS)
    assert page.status_code == 200 and b"revoke_action" not in page.content


def test_the_boot_config_page_shows_the_kernel_command_line_and_cannot_add(admin_client, node):
    config, _ = provision(node)
    page = admin_client.get(f"/admin/provisioning/bootconfig/{config.pk}/change/")
    assert page.status_code == 200
    assert f"ds=nocloud;s=https://nodewarden.example.com/cloud-init/{config.instance_key}/".encode() in page.content
    assert admin_client.get("/admin/provisioning/bootconfig/add/").status_code == 403


def test_a_bad_mac_in_the_admin_form_is_named(admin_client, node):
    config, _ = provision(node)
    page = admin_client.post(
        f"/admin/provisioning/bootconfig/{config.pk}/change/",
        {
            "boot_image": "",
            "boot_image_url": "",
            "kernel_cmdline_extra": "",
            "interface_mac": "nonsense",
            "ip_address": "",
            "prefix_length": "",
            "gateway": "",
            "dns_servers": "[]",
            "mtu": "",
            "vlan_id": "",
        },
    )
    assert page.status_code == 200
    assert b"is not a MAC address" in page.content
