"""REST routes of the event feed, mounted under /api/ (see nodewarden/api_urls.py)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("event-subscriptions", views.SubscriptionViewSet, basename="eventsubscription")
router.register("event-dead-letters", views.DeadLetterViewSet, basename="eventdeadletter")

urlpatterns = [
    path("events/", views.EventsView.as_view(), name="events"),
    *router.urls,
]
