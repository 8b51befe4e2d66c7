"""Our canonical bytes against an independent RFC 8785 implementation (``rfc8785``).

ARCHITECTURE.md, "Canonical bytes": every identity is SHA-256 over RFC 8785
(JCS) canonical JSON. The golden vectors were written by hand; this test adds
a second oracle that we did not write: for every value,
``smf_assurance.subjects.canonical.canonical_bytes`` must equal ``rfc8785.dumps`` of the same
value, and refuse exactly what it refuses, on the golden vectors
(``tests/vectors/``) and on hypothesis-generated JSON.

We deliberately differ from plain JCS in four ways; :func:`jcs_with_our_rules`
applies each of them (and nothing else) before handing the value to
``rfc8785``, so every other byte of the comparison is the oracle's:

1. **NFC.** We NFC-normalize every string and key before encoding
   (ARCHITECTURE.md, "after NFC normalization of every string"); JCS encodes
   code points as given. The oracle sees the NFC form.
2. **Duplicate keys after NFC.** Two keys that become equal under NFC are
   refused by us (the value would silently lose one); after (1) a Python dict
   would just merge them, so such a value is excluded from the oracle and must
   be refused by us.
3. **No floats.** We refuse every float, even an integral one (``1.0``), so
   that no identity depends on float formatting (integers only, I-JSON safe
   range); JCS serializes finite floats (ECMA-262 number form). A finite float
   is excluded from the oracle and must be refused by us. Non-finite floats
   (NaN, infinities) are NOT excluded: JCS refuses them too, and the oracle's
   own refusal is checked.
4. **Nesting bound.** We refuse a value nested deeper than
   ``smf_assurance.subjects.canonical.MAX_DEPTH`` (the top-level value is at depth 0), so a
   hostile value cannot exhaust the stack; JCS has no bound. Such a value is
   excluded and must be refused by us.

Everything else is the oracle's alone and must agree: key order by UTF-16 code
units, string escapes, literal UTF-8, integer form, the I-JSON safe integer
range and the refusal of lone surrogates. Inputs that are not JSON at all
(``json.loads`` refuses them) are a parser question, not a canonicalization
one, and are skipped. The ``verify`` vectors (is this text already canonical?)
use the same rule: canonical for us exactly when the oracle reproduces the
text byte for byte.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smf_assurance.subjects.canonical import (
    MAX_DEPTH,
    SAFE_INTEGER_MAX,
    CanonicalJSONError,
    canonical_bytes,
    parse_canonical,
)
from tests.support.canonical import JSON_VALUES, TEXT

VECTORS = Path(__file__).parents[1] / "vectors"
FILES = ("canonical.json", "canonical_more.json")

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


ORACLE_REFUSES = (rfc8785.CanonicalizationError, UnicodeEncodeError)
"""How ``rfc8785`` 0.1.4 refuses: its own error, except for a lone surrogate in an
object KEY, which escapes its key sort as the codec's ``UnicodeEncodeError``."""


class Excluded(Exception):
    """The value falls under one of our deliberate differences from JCS (module docstring)."""


def _ours_rules(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise Excluded(f"nesting deeper than {MAX_DEPTH}")
    if isinstance(value, float) and math.isfinite(value):
        raise Excluded("a finite float")
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            nkey = unicodedata.normalize("NFC", key) if isinstance(key, str) else key
            if nkey in out:
                raise Excluded("duplicate keys after NFC")
            out[nkey] = _ours_rules(item, depth + 1)
        return out
    if isinstance(value, list):
        return [_ours_rules(item, depth + 1) for item in value]
    return value


def jcs_with_our_rules(value: Any) -> bytes:
    """``rfc8785.dumps`` after our four deliberate differences (module docstring).

    Raises :class:`Excluded` for a value a difference rules out, and one of
    :data:`ORACLE_REFUSES` for one JCS itself refuses.
    """
    return rfc8785.dumps(_ours_rules(value, 0))


def assert_agrees(value: Any) -> None:
    """Ours equals the oracle where the oracle answers, and refuses where it refuses."""
    try:
        expected = jcs_with_our_rules(value)
    except (Excluded, *ORACLE_REFUSES):
        with pytest.raises(CanonicalJSONError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


def _vectors(section: str) -> Iterator[Any]:
    for name in FILES:
        data = json.loads((VECTORS / name).read_text(encoding="ascii"))
        for vector in data.get(section, ()):
            yield pytest.param(vector, id=f"{name}:{vector['name']}")


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pytest.skip("not JSON: a parser question, not a canonicalization one")


@pytest.mark.parametrize("vector", [*_vectors("encode"), *_vectors("unicode_divergence")])
def test_encode_vectors_agree_with_rfc8785(vector: dict[str, Any]) -> None:
    value = _parsed(vector["input"])
    assert_agrees(value)
    expected = vector.get("canonical", vector.get("python_canonical"))
    if expected is not None:
        assert jcs_with_our_rules(value) == expected.encode("utf-8")


@pytest.mark.parametrize("vector", list(_vectors("verify")))
def test_verify_vectors_agree_with_rfc8785(vector: dict[str, Any]) -> None:
    """Canonical for ``parse_canonical`` exactly when the oracle reproduces the text."""
    raw = vector["input"].encode("utf-8", "surrogatepass")
    try:
        value = json.loads(vector["input"])
        oracle_canonical = jcs_with_our_rules(value) == raw
    except (ValueError, RecursionError, Excluded, *ORACLE_REFUSES):
        oracle_canonical = False
    try:
        parse_canonical(vector["input"])
        ours_canonical = True
    except CanonicalJSONError:
        ours_canonical = False
    assert ours_canonical == oracle_canonical == bool(vector.get("canonical"))


FLOATS = st.floats(allow_nan=True, allow_infinity=True)
UNSAFE_INT = st.one_of(
    st.integers(min_value=SAFE_INTEGER_MAX + 1), st.integers(max_value=-SAFE_INTEGER_MAX - 1)
)
LONE_SURROGATES = st.text(st.sampled_from("a\ud800\udbff\udc00\udfff"), min_size=1, max_size=4)
"""Text with lone surrogates (``st.text`` never draws them), which both must refuse."""
ANY_SCALAR = st.one_of(JSON_VALUES, FLOATS, UNSAFE_INT, LONE_SURROGATES)
WILD_VALUES = st.recursive(
    ANY_SCALAR,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(TEXT, LONE_SURROGATES), children, max_size=4),
    ),
    max_leaves=20,
)
"""JSON values with floats, unsafe integers, lone surrogates and keys that collide
after NFC mixed in: the refusals must agree as well as the bytes."""


@SETTINGS
@given(JSON_VALUES)
def test_generated_json_agrees_with_rfc8785(value: Any) -> None:
    expected = jcs_with_our_rules(value)
    assert canonical_bytes(value) == expected


@SETTINGS
@given(WILD_VALUES)
def test_generated_refusals_agree_with_rfc8785(value: Any) -> None:
    assert_agrees(value)


def test_the_oracle_orders_keys_by_utf16_not_code_points() -> None:
    """The oracle is not vacuous on the one ordering rule Python gets wrong by default."""
    value = {"\ue000": 1, "\U0001f600": 2}
    assert jcs_with_our_rules(value) == canonical_bytes(value)
    assert list(json.loads(canonical_bytes(value))) == ["\U0001f600", "\ue000"]
