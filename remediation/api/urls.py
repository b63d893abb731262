"""REST routes of remediation, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("remediations", views.RemediationViewSet, basename="remediation")
router.register("holds", views.HoldViewSet, basename="hold")
router.register("circuit-breakers", views.CircuitBreakerViewSet, basename="circuitbreaker")

urlpatterns = [
    *router.urls,
    path("nodes/<int:pk>/remediations/", views.NodeRemediationsView.as_view(), name="node-remediations"),
]
