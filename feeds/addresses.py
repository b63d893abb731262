"""Where a customer's webhook may point: public addresses only.

A customer's subscription makes Nodewarden's workers POST to a URL the customer chose; without
this check it could reach the portal's own network (loopback, private ranges, link-local cloud
metadata at 169.254.169.254). The check runs when the subscription is made (a clear 400) and
again before each send (the name may resolve elsewhere since: DNS rebinding). Staff-made
subscriptions are trusted. ``NODEWARDEN_FEED_PRIVATE_HOSTS`` lists host names a site allows
customers anyway (an in-house receiver).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class AddressRefused(ValueError):
    """The URL's host is not a public address a customer may send events to."""


def check_public(url: str) -> None:
    """Raise AddressRefused unless every address the URL's host resolves to is global."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise AddressRefused("Only http(s) URLs with a host are allowed.")
    if host.lower() in {h.lower() for h in settings.NODEWARDEN_FEED_PRIVATE_HOSTS}:
        return
    try:
        infos = socket.getaddrinfo(
            host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
        )
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"The host {host!r} does not resolve: {exc}.") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global:
            raise AddressRefused(
                f"The host {host!r} resolves to {address}, which is not a public address; "
                "ask an operator to allow it (NODEWARDEN_FEED_PRIVATE_HOSTS)."
            )
