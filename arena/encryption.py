"""Secrets kept in the database, encrypted at rest (Fernet: AES-128-CBC + HMAC-SHA256).

Anyone who can read the database (a dump, a backup, a `psql` on a port left open) sees only
tokens; the key lives outside it, in `ARENA_FIELD_ENCRYPTION_KEYS` or in `var/` (0600).
Several keys may be given, comma-separated: the first encrypts, all decrypt, so a key can be
rotated by putting a new one first and saving the rows again.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

PREFIX = "fernet:"  # marks an encrypted value; rows written before encryption have none


@cache
def _box(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode()) for key in keys])


def secret_encrypt(clear: str) -> str:
    box = _box(tuple(settings.FIELD_ENCRYPTION_KEYS))
    return PREFIX + box.encrypt(clear.encode()).decode()


def secret_decrypt(stored: str) -> str:
    """The clear text of `stored`; a value without the prefix predates encryption and is
    returned as it is (the data migration encrypts such rows)."""
    if not stored.startswith(PREFIX):
        return stored
    box = _box(tuple(settings.FIELD_ENCRYPTION_KEYS))
    try:
        return box.decrypt(stored.removeprefix(PREFIX).encode()).decode()
    except InvalidToken:
        raise ValueError(
            "an encrypted database value does not open with ARENA_FIELD_ENCRYPTION_KEYS / "
            "var/field_encryption_key: was the key replaced without keeping the old one?"
        ) from None


class EncryptedTextField(models.TextField):
    """A text column whose values are stored encrypted and read back in clear.

    The empty string stays empty (so `if row.secret:` works without decrypting). Lookups
    other than on the empty string cannot work: each encryption of a value differs.
    """

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return secret_encrypt(str(value))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None or value == "":
            return value
        return secret_decrypt(value)
