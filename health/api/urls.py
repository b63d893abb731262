"""REST routes of the health app, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("findings", views.FindingViewSet, basename="finding")
router.register("alerts", views.AlertViewSet, basename="alert")
router.register("health-rules", views.HealthRuleViewSet, basename="healthrule")
router.register("xid-catalog", views.XidDefinitionViewSet, basename="xid")

urlpatterns = [
    *router.urls,
    path("nodes/<int:pk>/report-bad/", views.ReportBadNodeView.as_view(), name="node-report-bad"),
    path("ingest/alertmanager/", views.AlertmanagerWebhookView.as_view(), name="alertmanager-webhook"),
]
