"""Join tokens and kubeadm bootstrap tokens: how they are made, derived and hashed.

A join token must be handed out twice: once in the operator's API answer and again,
on every fetch, inside the node's cloud-init user-data. Yet the database keeps only
its SHA-256. Both hold because the clear token is not random but derived, like
Django's password-reset tokens: an HMAC (keyed by SECRET_KEY) of a random salt that
is stored next to the hash. A database dump alone joins no node; the portal, which
holds SECRET_KEY, can render user-data for as long as the token lives. Rotating
SECRET_KEY turns every outstanding token into one that no longer matches its hash:
those nodes answer 401 at join and need a fresh ``prepare_boot``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import string

from django.utils.crypto import salted_hmac

JOIN_TOKEN_PREFIX = "nwj_"  # noqa: S105 - the public prefix of every join token
_JOIN_PURPOSE = "nodewarden.provisioning.join-token"
_KUBEADM_PURPOSE = "nodewarden.provisioning.kubeadm-bootstrap-token"
# kubeadm bootstrap tokens are [a-z0-9]{6}.[a-z0-9]{16} (the id is public, the secret is not).
_KUBEADM_ALPHABET = string.ascii_lowercase + string.digits
KUBEADM_ID_LENGTH, KUBEADM_SECRET_LENGTH = 6, 16


def new_salt() -> str:
    return secrets.token_hex(16)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def join_token_for(salt: str) -> str:
    """The clear join token of a stored salt: ``nwj_`` and 43 URL-safe characters (256 bits)."""
    digest = salted_hmac(_JOIN_PURPOSE, salt, algorithm="sha256").digest()
    return JOIN_TOKEN_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_kubeadm_token_id() -> str:
    return "".join(secrets.choice(_KUBEADM_ALPHABET) for _ in range(KUBEADM_ID_LENGTH))


def kubeadm_token_for(token_id: str, salt: str) -> str:
    """The bootstrap token ``<id>.<secret>`` of a stored id and salt (secret: ~82 bits, base 36)."""
    number = int.from_bytes(salted_hmac(_KUBEADM_PURPOSE, f"{token_id}:{salt}", algorithm="sha256").digest())
    chars = []
    for _ in range(KUBEADM_SECRET_LENGTH):
        number, index = divmod(number, len(_KUBEADM_ALPHABET))
        chars.append(_KUBEADM_ALPHABET[index])
    return f"{token_id}.{''.join(chars)}"
