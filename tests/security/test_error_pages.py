"""With DEBUG off (as the demo and production run), errors are the portal's own pages: a customer
who opens another tenant's node gets the styled 404, never Django's debug page listing every URL."""

from __future__ import annotations

import importlib

import pytest
from django.core.exceptions import PermissionDenied
from django.template import loader
from django.urls import clear_url_caches
from django.views.defaults import permission_denied

from nodes.choices import NodeState
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def test_a_customer_opening_another_tenants_node_gets_the_styled_404(client, settings, customer, other_tenant):
    settings.DEBUG = False
    theirs = NodeFactory(hostname="globex-secret-01", tenant=other_tenant, state=NodeState.PRODUCTION)
    client.force_login(customer)
    response = client.get(f"/nodes/{theirs.pk}/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in html and "css/app.css" in html and 'class="topbar"' in html
    assert "globex-secret-01" not in html and "URLconf" not in html and "acme-user" in html


def test_an_unknown_url_gets_the_styled_404(client, settings):
    settings.DEBUG = False
    response = client.get("/no/such/page/")
    assert response.status_code == 404 and b"<h1>Not found</h1>" in response.content


def test_a_permission_denied_gets_the_styled_403(rf, customer):
    request = rf.get("/")
    request.user = customer
    page = permission_denied(request, PermissionDenied())  # Django's handler403, as the URLconf leaves it
    assert page.status_code == 403 and b"<h1>Not allowed</h1>" in page.content and b"css/app.css" in page.content


def test_the_500_page_renders_without_a_request_or_database():
    html = loader.get_template("500.html").render()  # as django.views.defaults.server_error does
    assert "Something went wrong on our side" in html and "css/app.css" in html


def test_a_crashing_view_answers_the_styled_500(client, settings, monkeypatch):
    settings.DEBUG = False

    def boom(*args, **kwargs):
        raise RuntimeError("kaboom")

    urls = importlib.import_module("nodes.urls")
    monkeypatch.setattr(urls.urlpatterns[[p.name for p in urls.urlpatterns].index("node-list")], "callback", boom)
    clear_url_caches()
    client.raise_request_exception = False
    response = client.get("/nodes/")
    assert response.status_code == 500
    assert b"Something went wrong on our side" in response.content and b"kaboom" not in response.content


def test_a_bad_request_gets_the_styled_400(client, settings):
    """Django's handler400 answered its bare "<h1>Bad Request (400)</h1>" page for a host it does not serve."""
    settings.DEBUG = False
    response = client.get("/", HTTP_HOST="not-ours.example")
    html = response.content.decode()
    assert response.status_code == 400
    assert "<h1>Bad request</h1>" in html and "css/app.css" in html and 'class="topbar"' in html
