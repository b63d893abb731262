"""Portal routes of this app: the NoCloud seed files (cloud-init fetches <seed URL><file name>)."""

from django.urls import path

from . import views
from .choices import CloudInitPart

urlpatterns = [
    path(f"cloud-init/<str:instance_key>/{part}", views.seed_file, {"part": part}, name=f"cloud-init-{part}")
    for part in CloudInitPart.values
]
