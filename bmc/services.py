"""Services for BMC endpoints that are not calls to a BMC (those live in ``bmc.client``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .models import BmcEndpoint


@dataclass
class PollResult:
    """One poll run: endpoints tried, how many answered, and how many are still never polled."""

    tried: int
    answered: int
    never_polled: int


def poll_power_states(batch: int | None = None, seconds: float | None = None) -> PollResult:
    """Read the power state of up to ``batch`` endpoints (NODEWARDEN_BMC_POLL_BATCH), the least
    recently tried first, one try each with NODEWARDEN_BMC_POLL_TIMEOUT, for at most ``seconds``
    (NODEWARDEN_BMC_POLL_SECONDS).

    Oldest-tried first (never tried before all) is what bounds coverage: every endpoint is read
    within ceil(endpoints / batch) runs, whatever state its node is in and whether it answers;
    ``last_poll_at`` is stamped before the read so a dead BMC cannot hold its place.
    """
    from . import client
    from .drivers.base import BmcError

    batch = settings.NODEWARDEN_BMC_POLL_BATCH if batch is None else batch
    seconds = settings.NODEWARDEN_BMC_POLL_SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    order = (F("last_poll_at").asc(nulls_first=True), "pk")
    chosen = list(BmcEndpoint.objects.order_by(*order)[: max(batch, 0)])
    tried = answered = 0
    for endpoint in chosen:
        if time.monotonic() >= deadline:
            break
        BmcEndpoint.objects.filter(pk=endpoint.pk).update(last_poll_at=timezone.now())
        tried += 1
        try:
            client.read_power_state(endpoint, timeout=settings.NODEWARDEN_BMC_POLL_TIMEOUT, retry=False)
        except BmcError:
            continue  # recorded on the endpoint (last_error) by the client
        answered += 1
    return PollResult(tried, answered, BmcEndpoint.objects.filter(last_poll_at__isnull=True).count())


def rotate_credentials() -> int:
    """Re-encrypt every stored BMC password under the newest key in NODEWARDEN_BMC_KEYS.

    Run it after prepending a new key and before dropping the old one. Returns how
    many endpoints were re-encrypted.
    """
    count = 0
    with transaction.atomic():
        # Saving re-encrypts: the field encrypts with the first key, and decrypted with any.
        for endpoint in BmcEndpoint.objects.select_for_update().only("pk", "password").exclude(password=""):
            endpoint.save(update_fields=["password"])
            count += 1
    return count
