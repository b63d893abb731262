"""REST routes of the checks app, mounted under /api/ (see nodewarden/api_urls.py).

The two agent paths are the node agent's contract: keep them as they are.
"""

from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/checks/", views.NodeChecksView.as_view(), name="node-checks"),
    path("checks/<int:pk>/", views.CheckRunView.as_view(), name="checkrun-detail"),
    path("checks/<int:pk>/cancel/", views.CancelCheckView.as_view(), name="checkrun-cancel"),
    path("agent/checks/", views.AgentChecksView.as_view(), name="agent-checks"),
    path("agent/checks/<int:pk>/result/", views.AgentCheckResultView.as_view(), name="agent-check-result"),
]
