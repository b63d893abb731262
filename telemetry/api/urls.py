"""REST routes of the telemetry app, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("agent/reports/", views.agent_reports, name="agent-reports"),
    path("ingest/dcgm-exporter/", views.DcgmExporterPushView.as_view(), name="dcgm-exporter-push"),
    path("nodes/<int:pk>/gpu-health/", views.NodeGpuHealthView.as_view(), name="node-gpu-health"),
    path("nodes/<int:pk>/gpu-samples/", views.NodeGpuSamplesView.as_view(), name="node-gpu-samples"),
]
