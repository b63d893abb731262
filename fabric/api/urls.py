"""REST routes of the fabric, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("fabric/plans", views.PlanViewSet, basename="fabric-plan")
router.register("fabric/runs", views.RunViewSet, basename="fabric-run")
router.register("fabric/discrepancies", views.DiscrepancyViewSet, basename="fabric-discrepancy")
router.register("fabric/links", views.LinkViewSet, basename="fabric-link")
router.register("fabric/tickets", views.TicketViewSet, basename="fabric-ticket")
router.register("fabric/validations", views.ValidationViewSet, basename="fabric-validation")

urlpatterns = [
    *router.urls,
    path("fabric/discoveries/", views.DiscoveryUploadView.as_view(), name="fabric-discovery-upload"),
]
