"""Secret values of server configurations: sealed at rest, masked on screen.

A secret env value or header is stored as ``enc:v1:<Fernet token>`` with a key derived from
``SECRET_KEY``; the alternative, a ``${VAR}`` reference to the worker's environment, stores no
value at all. Either way pages show only ``MASK``, and the plain value exists only in the
gateway's ``ServerConfig`` (which masks it in every captured record).
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from conversations.loop.wire import MASK

SEALED_PREFIX = "enc:v1:"


class UnsealError(ValueError):
    """A sealed value cannot be opened (``SECRET_KEY`` changed since it was stored)."""


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"servers.vault:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def seal(value: str) -> str:
    """``value`` encrypted for storage (idempotent: a sealed value is returned as it is)."""
    if is_sealed(value):
        return value
    return SEALED_PREFIX + _fernet().encrypt(value.encode()).decode()


def unseal(value: str) -> str:
    """The plain value of a sealed one (a plain value is returned as it is).

    Raises:
        UnsealError: the value was sealed under another ``SECRET_KEY``.
    """
    if not is_sealed(value):
        return value
    try:
        return _fernet().decrypt(value[len(SEALED_PREFIX) :].encode()).decode()
    except InvalidToken:
        raise UnsealError(
            "a stored secret cannot be decrypted (SECRET_KEY changed?): enter it again"
        ) from None


def shown(value: str) -> str:
    """What a page may show of a stored value."""
    return MASK if is_sealed(value) else value
