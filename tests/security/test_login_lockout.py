"""Sign-in throttling (django-axes): NODEWARDEN_LOGIN_FAILURE_LIMIT wrong passwords for one user
from one address lock that pair out, with the portal's lockout page and 429."""

from __future__ import annotations

import pytest
import time_machine
from django.utils import timezone

pytestmark = pytest.mark.django_db


def _login(client, username: str, password: str, addr: str = "127.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=addr)


def test_too_many_wrong_passwords_lock_the_user_out_even_with_the_right_one(client, operator, settings):
    settings.AXES_FAILURE_LIMIT = 3
    assert [_login(client, "operator", "wrong").status_code for _ in range(2)] == [200, 200]  # the form again
    locked = _login(client, "operator", "wrong")
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content and b"css/app.css" in locked.content
    assert _login(client, "operator", "password").status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_lockout_is_for_that_user_from_that_address(client, operator, viewer, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        _login(client, "operator", "wrong")
    assert _login(client, "viewer", "password").status_code == 302  # another user from the same address
    client.logout()
    assert _login(client, "operator", "password", addr="10.0.0.9").status_code == 302  # the user elsewhere


def test_the_lockout_ends_after_the_cool_off(client, operator, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        _login(client, "operator", "wrong")
    assert _login(client, "operator", "password").status_code == 429
    with time_machine.travel(timezone.now() + settings.AXES_COOLOFF_TIME + timezone.timedelta(seconds=1)):
        assert _login(client, "operator", "password").status_code == 302


def test_a_successful_sign_in_resets_the_count(client, operator, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        _login(client, "operator", "wrong")
    assert _login(client, "operator", "password").status_code == 302
    client.logout()
    for _ in range(2):
        assert _login(client, "operator", "wrong").status_code == 200
    assert _login(client, "operator", "password").status_code == 302


def test_the_admin_login_is_locked_too(client, fleet_admin, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        client.post("/admin/login/", {"username": "fleetadmin", "password": "wrong"})
    assert client.post("/admin/login/", {"username": "fleetadmin", "password": "password"}).status_code == 429
