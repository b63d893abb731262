"""BMC passwords: encrypted at rest, rotatable, and never shown (admin, API, repr, errors, logs)."""

from __future__ import annotations

import io
import logging

import pytest
from cryptography.fernet import Fernet
from django.core import checks, serializers
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from bmc import client
from bmc.api.serializers import BmcEndpointSerializer
from bmc.drivers.base import BmcError, PowerAction
from bmc.fields import CredentialDecryptError
from bmc.models import BmcEndpoint

from .conftest import BmcEndpointFactory

pytestmark = pytest.mark.django_db
SECRET = "Sup3r-Secret-BMC-Pass"


def raw_password_column(endpoint: BmcEndpoint) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT password FROM {BmcEndpoint._meta.db_table} WHERE id = %s", [endpoint.pk])  # noqa: S608 - the model's table name
        return cursor.fetchone()[0]


def test_the_column_holds_only_ciphertext(db):
    endpoint = BmcEndpointFactory(password=SECRET)
    raw = raw_password_column(endpoint)
    assert SECRET not in raw and raw.startswith("gAAAAA")
    assert BmcEndpoint.objects.get(pk=endpoint.pk).password == SECRET


def test_an_empty_password_stays_empty(db):
    endpoint = BmcEndpointFactory(password="")
    assert raw_password_column(endpoint) == "" and BmcEndpoint.objects.get(pk=endpoint.pk).password == ""


def test_with_no_keys_configured_a_key_is_derived_from_the_secret_key(db, settings):
    settings.NODEWARDEN_BMC_KEYS = []
    endpoint = BmcEndpointFactory(password=SECRET)
    settings.SECRET_KEY = "another-secret-key"
    with pytest.raises(CredentialDecryptError, match="cannot be decrypted"):
        BmcEndpoint.objects.get(pk=endpoint.pk)


def test_keys_rotate_newest_first(db, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.NODEWARDEN_BMC_KEYS = [old]
    endpoint = BmcEndpointFactory(password=SECRET)
    settings.NODEWARDEN_BMC_KEYS = [new, old]
    assert BmcEndpoint.objects.get(pk=endpoint.pk).password == SECRET  # the old key still decrypts
    out = io.StringIO()
    call_command("bmc_rotate_credentials", stdout=out)
    assert "Re-encrypted 1 BMC credential(s)" in out.getvalue()
    settings.NODEWARDEN_BMC_KEYS = [new]
    assert BmcEndpoint.objects.get(pk=endpoint.pk).password == SECRET  # re-encrypted under the new key


def test_a_malformed_key_fails_the_system_check_without_showing_it(settings):
    settings.NODEWARDEN_BMC_KEYS = ["not-a-fernet-key-at-all"]
    errors = [e for e in checks.run_checks() if e.id == "bmc.E001"]
    assert errors and "malformed" in errors[0].msg and "not-a-fernet-key-at-all" not in errors[0].msg


def test_str_and_repr_never_show_the_password(db):
    endpoint = BmcEndpointFactory(password=SECRET)
    assert SECRET not in str(endpoint) and SECRET not in repr(endpoint)
    assert SECRET not in repr(client.driver_for(endpoint))


def test_dumpdata_writes_the_token_and_loads_it_back(db):
    endpoint = BmcEndpointFactory(password=SECRET)
    dumped = serializers.serialize("json", [endpoint])
    assert SECRET not in dumped
    [restored] = serializers.deserialize("json", dumped)
    assert restored.object.password == SECRET


def test_the_api_serializer_accepts_a_password_and_never_returns_it(db):
    endpoint = BmcEndpointFactory(password=SECRET)
    assert "password" not in BmcEndpointSerializer(endpoint).data
    serializer = BmcEndpointSerializer(endpoint, data={"password": ""}, partial=True)
    assert serializer.is_valid(), serializer.errors
    serializer.save()
    assert BmcEndpoint.objects.get(pk=endpoint.pk).password == SECRET  # blank keeps


def test_an_address_with_credentials_in_it_is_refused(db):
    endpoint = BmcEndpointFactory.build(address="https://admin:hunter2@10.0.0.5")
    with pytest.raises(ValidationError, match="not in the address"):
        endpoint.full_clean(exclude=["node"])


class TestAdmin:
    def change_url(self, endpoint: BmcEndpoint) -> str:
        return reverse("admin:bmc_bmcendpoint_change", args=[endpoint.pk])

    def form_data(self, endpoint: BmcEndpoint, **overrides: object) -> dict[str, object]:
        data = {
            "node": endpoint.node_id,
            "driver": endpoint.driver,
            "address": endpoint.address,
            "system_id": endpoint.system_id,
            "username": endpoint.username,
            "password": "",
            "verify_tls": "on",
        }
        return {**data, **overrides}

    def test_the_change_page_never_renders_the_password(self, client, fleet_admin):
        endpoint = BmcEndpointFactory(password=SECRET)
        client.force_login(fleet_admin)
        page = client.get(self.change_url(endpoint))
        assert page.status_code == 200 and b'type="password"' in page.content
        assert SECRET.encode() not in page.content and raw_password_column(endpoint).encode() not in page.content
        changelist = client.get(reverse("admin:bmc_bmcendpoint_changelist"))
        assert changelist.status_code == 200 and SECRET.encode() not in changelist.content

    def test_a_blank_password_keeps_the_stored_one(self, client, fleet_admin):
        endpoint = BmcEndpointFactory(password=SECRET)
        client.force_login(fleet_admin)
        response = client.post(self.change_url(endpoint), self.form_data(endpoint, username="root"))
        assert response.status_code == 302
        stored = BmcEndpoint.objects.get(pk=endpoint.pk)
        assert stored.username == "root" and stored.password == SECRET

    def test_a_new_password_replaces_it(self, client, fleet_admin):
        endpoint = BmcEndpointFactory(password=SECRET)
        client.force_login(fleet_admin)
        client.post(self.change_url(endpoint), self.form_data(endpoint, password="N3w-Pass"))
        assert BmcEndpoint.objects.get(pk=endpoint.pk).password == "N3w-Pass"


def _exception_texts(exc: BaseException | None) -> str:
    texts = []
    while exc is not None:
        texts += [str(exc), repr(exc)]
        exc = exc.__cause__ or exc.__context__
    return " ".join(texts)


def test_the_password_never_reaches_logs_errors_or_last_error(redfish_endpoint, ipmi_endpoint, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, sushy's and urllib3's included
    secrets = [redfish_endpoint.password, ipmi_endpoint.password]
    client.read_inventory(redfish_endpoint)
    client.power(redfish_endpoint, PowerAction.FORCE_RESTART)
    client.read_inventory(ipmi_endpoint)
    failures = []
    for endpoint in (redfish_endpoint, ipmi_endpoint):
        endpoint.password = wrong = f"Wrong-{endpoint.driver}-Pass"
        secrets.append(wrong)
        with pytest.raises(BmcError) as caught:
            client.read_inventory(endpoint)
        failures.append(_exception_texts(caught.value))
    recorded = " ".join(BmcEndpoint.objects.values_list("last_error", flat=True))
    for secret in secrets:
        assert secret not in caplog.text
        assert all(secret not in text for text in failures)
        assert secret not in recorded
