"""REST routes of Day 1, mounted under /api/."""

from django.urls import path

from . import views

urlpatterns = [
    path("nodes/<int:pk>/stages/", views.NodeStagesView.as_view(), name="node-stages"),
    path("nodes/<int:pk>/stages/start/", views.StartStageView.as_view(), name="node-stage-start"),
    path("nodes/<int:pk>/stages/skip/", views.SkipStageView.as_view(), name="node-stage-skip"),
    path("nodes/<int:pk>/persona/", views.NodePersonaView.as_view(), name="node-persona"),
    path("day1/summary/", views.Day1SummaryView.as_view(), name="day1-summary"),
]
