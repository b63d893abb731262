"""Portal pages of the repairs app."""

from django.contrib.auth.decorators import login_required
from django.urls import path

from . import views

urlpatterns = [
    path("repairs/", login_required(views.repair_list), name="repair-list"),
    path("repairs/<int:pk>/", login_required(views.repair_detail), name="repair-detail"),
    path("repairs/<int:pk>/<slug:verb>/", login_required(views.repair_action), name="repair-action"),
    path("rma/", login_required(views.rma_list), name="rma-list"),
    path("rma/<int:pk>/", login_required(views.rma_detail), name="rma-detail"),
    path("rma/<int:pk>/<slug:verb>/", login_required(views.rma_action), name="rma-action"),
    path("nodes/<int:pk>/repairs/", login_required(views.node_repairs), name="node-repairs"),
    path("nodes/<int:pk>/repairs/open/", login_required(views.node_repair_open), name="node-repair-open"),
    path("nodes/<int:pk>/rma/open/", login_required(views.node_rma_open), name="node-rma-open"),
]
