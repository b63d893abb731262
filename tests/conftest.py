"""Shared fixtures: personas (admin, operator, viewer, customer) and a small fleet."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import Group

from nodes.roles import FLEET_ADMINS, OPERATORS

from .factories import TenantFactory, UserFactory

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def operator(db):
    user = UserFactory(username="operator", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    return user


@pytest.fixture
def fleet_admin(db):
    user = UserFactory(username="fleetadmin", is_staff=True, is_superuser=True)
    user.groups.add(Group.objects.get(name=FLEET_ADMINS))
    return user


@pytest.fixture
def viewer(db):
    """Staff who may look at everything and change nothing."""
    return UserFactory(username="viewer", is_staff=True)


@pytest.fixture
def tenant(db):
    return TenantFactory(name="Acme AI", slug="acme")


@pytest.fixture
def other_tenant(db):
    return TenantFactory(name="Globex", slug="globex")


@pytest.fixture
def customer(tenant):
    return UserFactory(username="acme-user", tenant=tenant)


def require_service(env_var: str, what: str) -> str:
    """The URL of a real service started by bin/test; in CI its absence is a failure, not a skip."""
    url = os.environ.get(env_var, "")
    if not url:
        if IN_CI:
            pytest.fail(f"{what} is required in CI but {env_var} is not set (run bin/test)")
        pytest.skip(f"{what} not configured ({env_var} unset); bin/test starts one")
    return url
