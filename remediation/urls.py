"""Portal pages of this app."""
from django.urls import path  # noqa: F401

urlpatterns: list = []
