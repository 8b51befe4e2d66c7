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
