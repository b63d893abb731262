"""Portal pages of the fabric (staff only)."""

from django.urls import path

from . import views

urlpatterns = [
    path("fabric/", views.overview, name="fabric-overview"),
    path("fabric/plans/", views.plan_upload, name="fabric-plan-upload"),
    path("fabric/discrepancies/", views.discrepancy_list, name="fabric-discrepancies"),
    path("fabric/tickets/", views.ticket_list, name="fabric-tickets"),
    path("fabric/tickets/<int:pk>/", views.ticket_detail, name="fabric-ticket"),
    path("fabric/tickets/<int:pk>/close/", views.ticket_close, name="fabric-ticket-close"),
    path("fabric/links/<int:device_id>/<int:port>/", views.link_detail, name="fabric-link"),
    path("fabric/validations/", views.validation_list, name="fabric-validations"),
]
