"""REST routes of the checks app, mounted under /api/ (see nodewarden/api_urls.py)."""
from django.urls import path  # noqa: F401

urlpatterns: list = []
