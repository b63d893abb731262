"""The NoCloud seed a booting node's cloud-init reads: /cloud-init/<instance_key>/<file>.

No login: the node has no credentials yet. The unguessable instance key in the URL is
what names (and guards) a node's seed; an unknown key answers 404 and says nothing more.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from . import cloudinit
from .choices import CloudInitPart
from .models import BootConfig


@require_safe
def seed_file(request: HttpRequest, instance_key: str, part: str) -> HttpResponse:
    """GET one file of the node's seed; user-data and meta-data exist once the node was provisioned."""
    boot = BootConfig.objects.select_related("node__cluster").filter(instance_key=instance_key).first()
    if boot is None or boot.generation == 0:
        raise Http404("No such seed.")
    if part == CloudInitPart.VENDOR_DATA:
        body = cloudinit.vendor_data()
    elif part == CloudInitPart.NETWORK_CONFIG:
        body = cloudinit.network_config(boot)
    elif part == CloudInitPart.META_DATA:
        body = cloudinit.meta_data(boot)
    else:
        token = cloudinit.current_join_token(boot)
        if token is None:
            raise Http404("No join token issued for this boot.")
        body = cloudinit.user_data(boot, token)
        if request.method == "GET":
            BootConfig.objects.filter(pk=boot.pk).update(user_data_fetched_at=timezone.now())
    response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    # user-data holds a live credential: no proxy or browser may keep a copy.
    response["Cache-Control"] = "no-store"
    return response
