"""manage.py bmc_rotate_credentials: re-encrypt BMC passwords under the newest key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from bmc.services import rotate_credentials


class Command(BaseCommand):
    help = "Re-encrypt every stored BMC password under the first key in NODEWARDEN_BMC_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        count = rotate_credentials()
        self.stdout.write(f"Re-encrypted {count} BMC credential(s) under the newest key.")
