"""Portal pages of the fleet auditor."""

from django.urls import path

from . import views

urlpatterns = [
    path("audit/", views.overview, name="audit-overview"),
]
