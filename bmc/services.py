"""Services for BMC endpoints that are not calls to a BMC (those live in ``bmc.client``)."""

from __future__ import annotations

from django.db import transaction

from .models import BmcEndpoint


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
