"""Portal pages of Day 1."""

from django.urls import path

from . import views

urlpatterns = [
    path("day1/", views.day1_overview, name="day1-overview"),
    path("nodes/<int:pk>/day1/", views.node_day1, name="node-day1"),
    path("nodes/<int:pk>/day1/<slug:action>/", views.node_stage_action, name="node-stage-action"),
]
