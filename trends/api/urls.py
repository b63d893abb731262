"""REST routes of trends, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("trends/flags", views.TrendFlagViewSet, basename="trendflag")

urlpatterns = [
    *router.urls,
    path("trends/lemons/", views.LemonsView.as_view(), name="trend-lemons"),
]
