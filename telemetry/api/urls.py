"""REST routes of the telemetry app, mounted under /api/ (see nodewarden/api_urls.py).

The agent paths are the node agent's contract: keep them as they are.
"""

from django.urls import path

from . import views

urlpatterns = [
    path("agent/reports/", views.agent_reports, name="agent-reports"),
    path("agent/state/", views.AgentStateView.as_view(), name="agent-state"),
    path("agent/commands/", views.AgentCommandsView.as_view(), name="agent-commands"),
    path("agent/commands/<int:pk>/result/", views.AgentCommandResultView.as_view(), name="agent-command-result"),
    path("ingest/dcgm-exporter/", views.DcgmExporterPushView.as_view(), name="dcgm-exporter-push"),
    path("nodes/<int:pk>/commands/", views.NodeCommandsView.as_view(), name="node-commands"),
    path("nodes/<int:pk>/gpu-health/", views.NodeGpuHealthView.as_view(), name="node-gpu-health"),
    path("nodes/<int:pk>/gpu-samples/", views.NodeGpuSamplesView.as_view(), name="node-gpu-samples"),
]
