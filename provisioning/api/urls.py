"""REST routes of this app, mounted under /api/ (see nodewarden/api_urls.py).

``agent/join/`` is the node agent's contract: keep it as it is.
"""

from django.urls import path

from . import enrollment, views

urlpatterns = [
    path("agent/join/", views.agent_join, name="agent-join"),
    path("nodes/<int:pk>/provision/", views.NodeProvisionView.as_view(), name="node-provision"),
    path("enrollments/", enrollment.EnrollmentView.as_view(), name="enrollments"),
]
