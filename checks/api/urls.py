"""REST routes of the checks app, mounted under /api/ (see nodewarden/api_urls.py).

The agent paths are the node agent's contract: keep them as they are.
"""

from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/checks/", views.NodeChecksView.as_view(), name="node-checks"),
    path("checks/<int:pk>/", views.CheckRunView.as_view(), name="checkrun-detail"),
    path("checks/<int:pk>/cancel/", views.CancelCheckView.as_view(), name="checkrun-cancel"),
    path("agent/checks/", views.AgentChecksView.as_view(), name="agent-checks"),
    path("nodes/<int:pk>/give-back/", views.GiveBackNodeView.as_view(), name="node-give-back"),
    path("agent/checks/<int:pk>/", views.AgentRunStateView.as_view(), name="agent-check-state"),
    path("agent/checks/<int:pk>/result/", views.AgentCheckResultView.as_view(), name="agent-check-result"),
]
