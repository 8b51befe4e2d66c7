"""Canonical JSON bytes and the identities computed over them.

ARCHITECTURE.md, "Canonical bytes": every identity is SHA-256 over RFC 8785
(JCS) canonical JSON of the value after NFC normalization of every string.
Integers only, within the I-JSON safe range (RFC 7493 section 2.2); object
keys ordered by UTF-16 code units (RFC 8785 section 3.2.3), which is what a
JavaScript sort does and not always what a Python sort does. The TypeScript
adapter consumes the same golden vectors in ``tests/vectors/``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, TypeVar

import msgspec

SAFE_INTEGER_MAX: Final = 2**53 - 1
"""Largest integer a JavaScript double holds exactly (I-JSON, RFC 7493 2.2)."""

MAX_DEPTH: Final = 64
"""Nesting bound, so a hostile value cannot exhaust the stack."""

IDENTITY_PREFIX: Final = "sha256:"
IDENTITY_PATTERN: Final = r"^sha256:[0-9a-f]{64}\Z"
"""``\\Z``, not ``$``: in Python ``$`` also matches before a trailing newline."""
_IDENTITY_RE: Final = re.compile(IDENTITY_PATTERN)

Identity = Annotated[str, msgspec.Meta(pattern=IDENTITY_PATTERN)]
"""A ``sha256:`` identity as a message field: the one declaration every Struct uses."""

S = TypeVar("S", bound=msgspec.Struct)


def validated(value: S) -> S:
    """``value`` checked against its own type's constraints, or ``msgspec.ValidationError``.

    msgspec checks ``Meta`` constraints (patterns, bounds, lengths) when it
    decodes, not when code constructs a Struct; a Struct built in process
    (a binding, an evidence entry, a manifest) is passed through here before it
    is trusted, so it obeys the same contract as one read from the wire.
    """
    return msgspec.convert(msgspec.to_builtins(value), type(value))


_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
)
_SORTED_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False,
    separators=(",", ":"),
    allow_nan=False,
    check_circular=False,
    sort_keys=True,
)
"""The same encoder, ordering keys itself: for ASCII keys, code-point order is the
UTF-16 code-unit order RFC 8785 asks for (used only on :func:`_is_plain` values)."""


class CanonicalJSONError(ValueError):
    """The value has no canonical form (float, unsafe integer, bad string...)."""


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be")


def _normalize_string(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(f"lone surrogate in string at {where}") from exc
    return unicodedata.normalize("NFC", value)


def _normalize(value: Any, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise CanonicalJSONError(f"nesting deeper than {MAX_DEPTH} at {where}")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if -SAFE_INTEGER_MAX <= value <= SAFE_INTEGER_MAX:
            return value
        raise CanonicalJSONError(f"integer outside the I-JSON safe range at {where}")
    if isinstance(value, float):
        kind = "NaN or infinity" if not math.isfinite(value) else "float"
        raise CanonicalJSONError(f"{kind} is not allowed at {where}; use integers")
    if isinstance(value, str):
        return _normalize_string(value, where)
    if isinstance(value, Mapping):
        items: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJSONError(f"object key is not a string at {where}")
            nkey = _normalize_string(key, where)
            if nkey in items:
                raise CanonicalJSONError(
                    f"duplicate key {nkey!r} after NFC normalization at {where}"
                )
            items[nkey] = _normalize(item, f"{where}.{nkey}", depth + 1)
        return {k: items[k] for k in sorted(items, key=_utf16_key)}
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_normalize(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise CanonicalJSONError(f"type {type(value).__name__} has no JSON form at {where}")


def _is_plain(value: Any, depth: int) -> bool:
    """True when the normalizing walk would return ``value`` unchanged but for key order.

    That holds for plain ``dict``/``list``/``tuple`` trees of ASCII strings and
    keys, safe integers, booleans and ``None`` within the depth bound: an ASCII
    string is valid UTF-8 and already NFC, so no string changes and no two keys
    can merge, and ASCII keys sort the same by code point as by UTF-16 code
    unit. Anything else (a non-ASCII string, a float, an unsafe integer, a
    subclass, another type, too deep) answers False and takes the full walk,
    which decides it and words any refusal. Checks only; allocates nothing.
    """
    if depth > MAX_DEPTH:
        return False
    kind = type(value)
    if kind is str:
        text: str = value
        return text.isascii()
    if kind is int:
        number: int = value
        return -SAFE_INTEGER_MAX <= number <= SAFE_INTEGER_MAX
    if kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii() or not _is_plain(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_is_plain(item, depth + 1) for item in value)
    return False


def canonical_value(value: Any) -> Any:
    """Return the NFC-normalized, key-ordered copy of a JSON value."""
    return _normalize(value, "$", 0)


def canonical_bytes(value: Any) -> bytes:
    """Serialize a JSON value to its canonical (JCS + NFC) UTF-8 bytes.

    The standard library encoder already emits the JCS string form: the six
    short escapes, ``\\u00xx`` in lower case for the other control characters,
    everything else as literal UTF-8; so only the value is prepared here.

    Fast path: most values the gate signs, verifies and hashes are plain ASCII
    (:func:`_is_plain`); for those the normalizing walk would copy the value
    unchanged, so the same encoder orders the keys itself and the copy is
    skipped. The bytes are the same either way (checked against the full walk,
    the golden vectors and the RFC 8785 oracle in the tests).
    """
    if _is_plain(value, 0):
        return _SORTED_ENCODER.encode(value).encode("utf-8")
    return _ENCODER.encode(_normalize(value, "$", 0)).encode("utf-8")


def parse_canonical(data: bytes | str) -> Any:
    """Parse JSON that must already be canonical; reject it otherwise.

    Used where a signature or digest covers the bytes, so that two parsers can
    never read different values from the same signed bytes.
    """
    try:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        value = json.loads(raw, parse_float=_reject_float, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise CanonicalJSONError(f"not JSON: {exc}") from exc
    if canonical_bytes(value) != raw:
        raise CanonicalJSONError("JSON is not in canonical form")
    return value


def _reject_float(text: str) -> Any:
    raise CanonicalJSONError(f"float {text} is not allowed; use integers")


def _reject_constant(text: str) -> Any:
    raise CanonicalJSONError(f"{text} is not allowed")


def sha256_identity(data: bytes) -> str:
    """``sha256:<hex>`` over raw bytes."""
    return IDENTITY_PREFIX + hashlib.sha256(data).hexdigest()


def identity_of(value: Any) -> str:
    """``sha256:<hex>`` over the canonical bytes of a JSON value."""
    return sha256_identity(canonical_bytes(value))


def struct_identity(value: Any) -> str:
    """``identity_of`` for msgspec Structs (and plain values) on the hot path.

    msgspec with ``order="sorted"`` writes the same escapes as the canonical
    encoder and orders ASCII keys as JCS does; an ASCII string is already NFC.
    So when the encoding is pure ASCII it IS the canonical form, and we skip
    the normalizing walk. Anything else takes the full path. Only for values
    whose integers the schema keeps in the I-JSON range (checked by tests
    against ``identity_of``).
    """
    raw = msgspec.json.encode(value, order="sorted")
    if raw.isascii():
        return sha256_identity(raw)
    return identity_of(msgspec.to_builtins(value))


def is_identity(text: str) -> bool:
    """True when ``text`` has the form ``sha256:<64 lower-case hex>``."""
    return _IDENTITY_RE.fullmatch(text) is not None
