"""Portal pages of the telemetry app."""

from django.contrib.auth.decorators import login_required
from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/gpu-health/", login_required(views.node_gpu_health), name="node-gpu-health"),
    path("nodes/<int:pk>/commands/", views.node_commands, name="node-commands"),
    path("nodes/<int:pk>/commands/issue/", views.node_command_issue, name="node-command-issue"),
]
