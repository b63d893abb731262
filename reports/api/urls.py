"""REST routes of the reports, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("reports/availability/", views.AvailabilityView.as_view(), name="report-availability"),
    path("reports/flows/", views.FlowsView.as_view(), name="report-flows"),
]
