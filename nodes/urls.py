"""Portal pages."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.fleet_overview, name="fleet-overview"),
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/bulk/", views.node_bulk_action, name="node-bulk"),
    path("nodes/export.csv", views.node_export_csv, name="node-export"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<int:pk>/history/", views.node_history, name="node-history"),
    path("nodes/<int:pk>/transitions/<slug:name>/", views.node_transition, name="node-transition"),
    path("nodes/<int:pk>/maintenance/end/", views.node_end_maintenance, name="node-end-maintenance"),
    path("nodes/<int:pk>/notes/", views.node_note, name="node-note"),
    path("nodes/<int:pk>/gpus/<int:index>/<slug:verb>/", views.node_gpu_action, name="node-gpu-action"),
]
