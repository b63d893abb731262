"""Portal pages of the checks app."""

from django.contrib.auth.decorators import login_required
from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/checks/", login_required(views.node_checks), name="node-checks"),
    path("nodes/<int:pk>/checks/request/", views.node_check_request, name="node-check-request"),
    path("checks/freshness/", views.check_freshness, name="check-freshness"),
]
