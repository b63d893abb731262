"""Portal pages of the health app."""
from django.contrib.auth.decorators import login_required
from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/alerts/", login_required(views.node_alerts), name="node-alerts"),
]
