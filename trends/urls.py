"""Portal pages of trends."""

from django.urls import path

from . import views

urlpatterns = [
    path("trends/", views.overview, name="trends-overview"),
    path("trends/nodes/<int:pk>/", views.node_trends_page, name="trends-node"),
    path("nodes/<int:pk>/trends/", views.node_trends_partial, name="node-trends"),
]
