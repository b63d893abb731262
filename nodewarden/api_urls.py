"""REST API routes, mounted under /api/ (schema at /api/schema/, docs at /api/docs/).

Namespaced ``api`` so its route names (``api:node-detail``) never shadow the
portal pages' names (``node-detail``).
"""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from fleet.api import views as fleet
from nodes.api import views as nodes

app_name = "api"


class Router(DefaultRouter):
    """DefaultRouter without format-suffix routes (``/api/nodes/1/history.json``): they pass a
    ``format`` argument no action takes (a 500), and ``?format=json`` or Accept say the same."""

    include_format_suffixes = False


router = Router()
router.register("nodes", nodes.NodeViewSet, basename="node")
router.register("sites", fleet.SiteViewSet, basename="site")
router.register("clusters", fleet.ClusterViewSet, basename="cluster")
router.register("tenants", fleet.TenantViewSet, basename="tenant")
router.register("hardware-profiles", fleet.HardwareProfileViewSet, basename="hardwareprofile")
router.register("personas", fleet.PersonaViewSet, basename="persona")

urlpatterns = [
    *router.urls,
    # Each app keeps its own routes: agent ingest and telemetry, findings and alerts, checks.
    path("", include("telemetry.api.urls")),
    path("", include("health.api.urls")),
    path("", include("checks.api.urls")),
    path("", include("provisioning.api.urls")),
    path("", include("validation.api.urls")),
    path("", include("repairs.api.urls")),
    path("", include("remediation.api.urls")),
    path("", include("trends.api.urls")),
    path("", include("fabric.api.urls")),
    path("", include("reports.api.urls")),
    path("", include("feeds.api.urls")),
]
