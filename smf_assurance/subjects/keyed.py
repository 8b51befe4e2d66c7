"""Keyed (pseudonymous) identifiers.

Tenants, matters and recipients must never appear in clear in evidence
(ARCHITECTURE.md, "Evidence"), yet the same tenant must map to the same
identifier. HMAC-SHA-256 (RFC 2104) with a secret key gives that. Domain and
value are each framed with an explicit 8-byte big-endian length, so no two
different (domain, value) pairs share an input: without framing,
``("a", "b\\0c")`` and ``("a\\0b", "c")`` would collide.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

KEYED_PREFIX: Final = "hmac-sha256:"
MIN_KEY_BYTES: Final = 32


class KeyedIdentifierError(ValueError):
    """The domain, value or key is not acceptable for a keyed identifier."""


def _check_domain(domain: str) -> bytes:
    if not domain:
        raise KeyedIdentifierError("keyed identifier domain must not be empty")
    if not all(0x20 <= ord(ch) < 0x7F for ch in domain):
        raise KeyedIdentifierError(
            "keyed identifier domain must be printable ASCII (no NUL or other control characters)"
        )
    return domain.encode("ascii")


def _frame(part: bytes) -> bytes:
    return len(part).to_bytes(8, "big") + part


def keyed_identifier(key: bytes, domain: str, value: str) -> str:
    """Return ``hmac-sha256:<hex>`` for ``value`` within ``domain`` under ``key``."""
    if len(key) < MIN_KEY_BYTES:
        raise KeyedIdentifierError(f"keyed identifier key must be at least {MIN_KEY_BYTES} bytes")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KeyedIdentifierError("keyed identifier value is not valid Unicode") from exc
    message = _frame(_check_domain(domain)) + _frame(encoded)
    return KEYED_PREFIX + hmac.new(key, message, hashlib.sha256).hexdigest()


class PseudonymKey:
    """The secret key of a tenant's keyed identifiers, as the gate carries it.

    A key must never reach a log, an error report or a traceback's
    locals by way of a repr. Its ``repr`` and ``str`` say ``<redacted>``, it
    compares by identity only (no equality test that could leak through
    timing or an assertion message), and it cannot be pickled; the bytes are
    used only inside :meth:`identifier`.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise KeyedIdentifierError(f"a pseudonym key must be at least {MIN_KEY_BYTES} bytes")
        self._key = bytes(key)

    def identifier(self, domain: str, value: str) -> str:
        """``keyed_identifier`` under this key."""
        return keyed_identifier(self._key, domain, value)

    def __repr__(self) -> str:
        return "PseudonymKey(<redacted>)"

    __str__ = __repr__

    def __reduce__(self) -> str:
        raise TypeError("a pseudonym key is not serialized")
