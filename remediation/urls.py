"""Portal pages of remediation."""

from django.urls import path

from . import views

urlpatterns = [
    path("remediation/", views.overview, name="remediation-overview"),
    path("remediation/summary/", views.remediation_summary, name="remediation-summary"),
    path("remediation/holds/", views.hold_place, name="remediation-hold-place"),
    path("remediation/holds/<int:pk>/release/", views.hold_release, name="remediation-hold-release"),
    path("remediation/breakers/<int:pk>/reset/", views.breaker_reset, name="remediation-breaker-reset"),
    path("remediation/<int:pk>/<slug:action>/", views.remediation_action, name="remediation-action"),
    path("nodes/<int:pk>/remediation/", views.node_remediation, name="node-remediation"),
]
