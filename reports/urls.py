"""Report pages and the Prometheus endpoint."""

from django.urls import path

from . import views

urlpatterns = [
    path("metrics", views.prometheus_metrics, name="metrics"),
    path("reports/", views.overview, name="report-overview"),
    path("reports/flows/", views.flow_nodes, name="report-flows"),
    path("reports/availability/", views.tenant_availability, name="report-availability"),
    path("reports/availability/export.csv", views.availability_csv, name="report-availability-csv"),
    path("reports/availability/incidents.csv", views.incidents_csv, name="report-incidents-csv"),
]
