"""Portal pages of the health app."""

from django.contrib.auth.decorators import login_required
from django.urls import path

from . import views

urlpatterns = [
    path("alerts/", login_required(views.alert_list), name="alert-list"),
    path("alerts/bulk/", login_required(views.alert_bulk_action), name="alert-bulk"),
    path("alerts/summary/", login_required(views.alert_summary), name="alert-summary"),
    path("alerts/<int:pk>/<str:verb>/", login_required(views.alert_action), name="alert-action"),
    path("nodes/<int:pk>/report-bad/", login_required(views.report_bad_node), name="node-report-bad"),
    path("nodes/<int:pk>/alerts/", login_required(views.node_alerts), name="node-alerts"),
]
