"""Top-level URL configuration."""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("nodewarden.api_urls")),
    path("", include("telemetry.urls")),
    path("", include("health.urls")),
    path("", include("checks.urls")),
    path("", include("provisioning.urls")),
    path("", include("validation.urls")),
    path("", include("repairs.urls")),
    path("", include("remediation.urls")),
    path("", include("trends.urls")),
    path("", include("fabric.urls")),
    path("", include("reports.urls")),
    path("", include("audit.urls")),
    path("", include("nodes.urls")),
]
