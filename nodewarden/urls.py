"""Top-level URL configuration.

The OpenAPI schema and Swagger UI are served only when NODEWARDEN_API_DOCS is not "off" (who may
read them: settings.SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]). Swagger UI is the split view: its
script is a file of its own, not an inline script the Content-Security-Policy would block.
Error pages: templates/400.html, 403.html, 404.html, 500.html (Django's default handlers find them by name).
"""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Pages without an icon link of their own (the Django admin) make browsers ask for this.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
]
if settings.NODEWARDEN_API_DOCS != "off":
    urlpatterns += [
        path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
        path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    ]
urlpatterns += [
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
