"""API clients acting as a persona; authentication itself is covered in test_auth."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api():
    """An anonymous API client."""
    return APIClient()


@pytest.fixture
def api_as():
    """A factory of API clients authenticated as the given user."""

    def make(user):  # type: ignore[no-untyped-def]
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make
