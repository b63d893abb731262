"""A text field stored encrypted at rest, for BMC credentials.

Values are Fernet tokens (AES-128-CBC + HMAC-SHA256) under the keys in
``settings.NODEWARDEN_BMC_KEYS``, newest first: the first key encrypts, every key
decrypts, so a key is rotated by prepending a new one, re-saving the rows
(``rotate_credentials``), then dropping the old key. With no keys configured one
key is derived from ``SECRET_KEY``, so a development checkout needs no set-up.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models.expressions import Combinable

HKDF_INFO = b"nodewarden-bmc-credentials"
# Every Fernet token starts with the version byte 0x80, which base64 writes as "gAAAAA".
TOKEN_PREFIX = "gAAAAA"  # noqa: S105 - the public prefix of every ciphertext


class CredentialDecryptError(ImproperlyConfigured):
    """A stored credential does not decrypt with any configured key (a key was dropped too early)."""


def derived_key(secret_key: str) -> bytes:
    """The development key: HKDF-SHA256 of SECRET_KEY, so it changes when SECRET_KEY does."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(secret_key.encode())
    return base64.urlsafe_b64encode(raw)


@lru_cache(maxsize=8)
def _fernet_for(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        return MultiFernet([Fernet(derived_key(secret_key))])
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError as exc:
        # The message never repeats the key itself.
        raise ImproperlyConfigured(
            "NODEWARDEN_BMC_KEYS holds a malformed key: each must be 32 url-safe base64-encoded bytes "
            "(make one with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
        ) from exc


def credential_cipher() -> MultiFernet:
    """The cipher for the current settings (cached per key set, so settings overrides in tests work)."""
    return _fernet_for(tuple(settings.NODEWARDEN_BMC_KEYS), settings.SECRET_KEY)


def encrypt(plaintext: str) -> str:
    return credential_cipher().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return credential_cipher().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise CredentialDecryptError(
            "A stored BMC credential cannot be decrypted with NODEWARDEN_BMC_KEYS: "
            "put back the key it was encrypted with (keys are newest first; keep old ones until rotated)."
        ) from exc


class EncryptedTextField(models.TextField[str | Combinable, str]):
    """Plain text in Python, a Fernet token in the database column. Empty stays empty.

    Lookups on the value are meaningless (every save encrypts with a fresh IV).
    Serialisation (dumpdata) writes the token, never the plaintext, and loading it
    back decrypts it, so fixtures round-trip without the secret appearing in them.
    """

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if not value:
            return value
        return decrypt(value)

    def to_python(self, value: Any) -> Any:
        # Deserialisation hands us the token that value_to_string wrote.
        if isinstance(value, str) and value.startswith(TOKEN_PREFIX):
            try:
                return credential_cipher().decrypt(value.encode()).decode()
            except InvalidToken:
                return value  # a password that merely looks like a token
        return super().to_python(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if not value:
            return value
        return encrypt(value)

    def value_to_string(self, obj: Any) -> str:
        value = self.value_from_object(obj)
        return encrypt(value) if value else ""
