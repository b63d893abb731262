"""GET /cloud-init/<instance_key>/<file>: what a booting node's cloud-init fetches."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from provisioning.models import BootConfig

from .conftest import provision

pytestmark = pytest.mark.django_db
PARTS = ["meta-data", "user-data", "vendor-data", "network-config"]


def seed(client, key: str, part: str):  # type: ignore[no-untyped-def]
    return client.get(f"/cloud-init/{key}/{part}")


def test_the_routes_are_named_after_the_files():
    assert reverse("cloud-init-user-data", kwargs={"instance_key": "k"}) == "/cloud-init/k/user-data"
    assert [reverse(f"cloud-init-{part}", kwargs={"instance_key": "k"}).rsplit("/", 1)[1] for part in PARTS] == PARTS


@pytest.mark.parametrize("part", PARTS)
def test_every_file_is_served_without_login_and_never_cached(client, node, part):
    config, _ = provision(node)
    response = seed(client, config.instance_key, part)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    assert yaml.safe_load(response.content) is not None


def test_user_data_carries_the_join_token_and_its_fetch_is_noted(client, node):
    config, token = provision(node)
    response = seed(client, config.instance_key, "user-data")
    assert response.content.decode().startswith("#cloud-config\n")
    assert token in response.content.decode()
    config.refresh_from_db()
    assert config.user_data_fetched_at is not None


@pytest.mark.parametrize("part", PARTS)
def test_an_unknown_key_answers_404_and_says_nothing(client, node, part):
    provision(node)
    response = seed(client, "x" * 43, part)
    assert response.status_code == 404
    assert node.hostname.encode() not in response.content


def test_a_boot_config_never_provisioned_has_no_seed(client, node):
    config = BootConfig.objects.create(node=node)
    assert seed(client, config.instance_key, "user-data").status_code == 404
    assert seed(client, config.instance_key, "meta-data").status_code == 404


def test_after_re_provisioning_the_same_url_serves_the_new_token(client, node):
    config, first = provision(node)
    _, second = provision(node)
    body = seed(client, config.instance_key, "user-data").content.decode()
    assert second in body and first not in body
    assert "iid-nodewarden-" in seed(client, config.instance_key, "meta-data").content.decode()


def test_only_reads_are_allowed(client, node):
    config, _ = provision(node)
    assert client.post(f"/cloud-init/{config.instance_key}/user-data").status_code == 405
    assert client.head(f"/cloud-init/{config.instance_key}/user-data").status_code == 200
