"""REST routes of the repairs app, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("repairs", views.RepairTicketViewSet, basename="repairticket")
router.register("rma", views.RmaCaseViewSet, basename="rmacase")

urlpatterns = [
    # Before the router, so "export.csv" is never taken for an id.
    path("repairs/export.csv", views.RepairTicketExportView.as_view(), name="repairticket-export"),
    path("rma/export.csv", views.RmaCaseExportView.as_view(), name="rmacase-export"),
    path("nodes/<int:pk>/repairs/", views.NodeRepairTicketsView.as_view(), name="node-repairtickets"),
    path("nodes/<int:pk>/rma/", views.NodeRmaCasesView.as_view(), name="node-rmacases"),
    *router.urls,
]
