"""Keyed identifiers (smf_assurance/subjects/keyed.py).

Properties: the golden vectors hold; the identifier is a real HMAC-SHA-256
over length-framed domain and value; framing makes (domain, value) pairs
injective (the ``a\\0b``/``b\\0c`` collision regression); the domain is
non-empty printable ASCII; the key is long enough.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smf_assurance.subjects.keyed import (
    KEYED_PREFIX,
    MIN_KEY_BYTES,
    KeyedIdentifierError,
    PseudonymKey,
    keyed_identifier,
)

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "keyed.json").read_text("ascii"))
KEY = bytes.fromhex(VECTORS["key_hex"])
SETTINGS = settings(max_examples=200, deadline=None)


def _reference(key: bytes, domain: str, value: str) -> str:
    """The spec written out independently: HMAC over u64be-length-framed parts."""
    d, v = domain.encode("ascii"), value.encode("utf-8")
    message = len(d).to_bytes(8, "big") + d + len(v).to_bytes(8, "big") + v
    return "hmac-sha256:" + hmac.new(key, message, hashlib.sha256).hexdigest()


# --- golden vectors -----------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_keyed_vector(vector: dict[str, Any]) -> None:
    key = bytes.fromhex(vector.get("key_hex", VECTORS["key_hex"]))
    if vector.get("error"):
        assert vector["reason"]
        with pytest.raises(KeyedIdentifierError):
            keyed_identifier(key, vector["domain"], vector["value"])
        return
    d = vector["domain"].encode("ascii")
    v = vector["value"].encode("utf-8")
    framed = len(d).to_bytes(8, "big") + d + len(v).to_bytes(8, "big") + v
    assert vector["message_hex"] == framed.hex()
    assert keyed_identifier(key, vector["domain"], vector["value"]) == vector["identifier"]


def test_vector_key_is_the_minimum_length() -> None:
    assert len(KEY) == MIN_KEY_BYTES


def _ok(name: str) -> str:
    return str(next(v["identifier"] for v in VECTORS["vectors"] if v["name"] == name))


def test_vectors_keep_the_collision_regression() -> None:
    names = {v["name"]: v for v in VECTORS["vectors"]}
    assert names["domain_with_nul"]["error"] is True
    assert names["empty_domain"]["error"] is True
    assert _ok("value_with_nul") != _ok("concatenation_a_bc")
    assert _ok("concatenation_a_bc") != _ok("concatenation_ab_c")


# --- the collision regression ---------------------------------------------------


def test_nul_in_domain_is_rejected_and_nul_in_value_is_not_a_collision() -> None:
    with pytest.raises(KeyedIdentifierError, match="printable ASCII"):
        keyed_identifier(KEY, "a\0b", "c")
    accepted = keyed_identifier(KEY, "a", "b\0c")
    assert accepted != keyed_identifier(KEY, "a", "bc")
    assert accepted != keyed_identifier(KEY, "a", "b")
    assert accepted != keyed_identifier(KEY, "ab", "c")


def test_split_point_changes_the_identifier() -> None:
    """Without framing these three would all be HMAC("abc")."""
    ids = {keyed_identifier(KEY, d, v) for d, v in (("a", "bc"), ("ab", "c"), ("abc", ""))}
    assert len(ids) == 3


@pytest.mark.claim("canonical-identities.keyed-framing")
@SETTINGS
@given(
    st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=2, max_size=12
    ),
    st.text(max_size=8).filter(lambda s: "\ud800" not in s),
    st.data(),
)
def test_framing_is_injective_over_split_points(whole: str, tail: str, data: st.DataObject) -> None:
    """Same concatenated bytes, different (domain, value) split: different identifiers."""
    cut_a = data.draw(st.integers(1, len(whole) - 1))
    cut_b = data.draw(st.integers(1, len(whole)).filter(lambda c: c != cut_a))
    first = keyed_identifier(KEY, whole[:cut_a], whole[cut_a:] + tail)
    second = keyed_identifier(KEY, whole[:cut_b], whole[cut_b:] + tail)
    assert first != second


# --- domain, value and key rules -------------------------------------------------


@pytest.mark.parametrize(
    "domain", ["", "a\0b", "\0", "tenant\n", "\ttenant", "tenant\x7f", "t\u00e9nant", "\u00a0"]
)
def test_bad_domains_are_rejected(domain: str) -> None:
    with pytest.raises(KeyedIdentifierError):
        keyed_identifier(KEY, domain, "value")


def test_a_domain_is_exactly_printable_ascii() -> None:
    """Every control character is refused, the unit separator U+001F and DEL
    included, and every printable ASCII character (space to tilde) is accepted."""
    for code in [*range(0x20), *range(0x7F, 0x100)]:
        with pytest.raises(KeyedIdentifierError, match="printable ASCII"):
            keyed_identifier(KEY, f"smf{chr(code)}tenant", "value")
    printable = "".join(chr(code) for code in range(0x20, 0x7F))
    assert keyed_identifier(KEY, printable, "value").startswith("hmac-sha256:")


def test_empty_domain_message() -> None:
    with pytest.raises(KeyedIdentifierError, match="must not be empty"):
        keyed_identifier(KEY, "", "value")


@pytest.mark.parametrize("domain", [" ", "~", "smf tenant/v1:~", "A" * 200])
def test_printable_ascii_domains_are_accepted(domain: str) -> None:
    assert keyed_identifier(KEY, domain, "v") == _reference(KEY, domain, "v")


def test_value_that_is_not_unicode_is_a_keyed_identifier_error() -> None:
    """A lone surrogate must fail as a KeyedIdentifierError, never as another type."""
    with pytest.raises(KeyedIdentifierError):
        keyed_identifier(KEY, "tenant", "\ud800")


@pytest.mark.parametrize("size", [0, 1, MIN_KEY_BYTES - 1])
def test_short_keys_are_rejected(size: int) -> None:
    with pytest.raises(KeyedIdentifierError, match="at least"):
        keyed_identifier(bytes(size), "tenant", "value")


def test_identifier_depends_on_key_domain_and_value() -> None:
    base = keyed_identifier(KEY, "tenant", "acme")
    assert keyed_identifier(bytes(64), "tenant", "acme") != base
    assert keyed_identifier(KEY, "matter", "acme") != base
    assert keyed_identifier(KEY, "tenant", "acme2") != base
    assert keyed_identifier(KEY, "tenant", "acme") == base


@pytest.mark.claim("canonical-identities.keyed-framing")
@SETTINGS
@given(
    st.binary(min_size=MIN_KEY_BYTES, max_size=80),
    st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20
    ),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
)
def test_identifier_is_real_hmac_sha256(key: bytes, domain: str, value: str) -> None:
    result = keyed_identifier(key, domain, value)
    assert result == _reference(key, domain, value)
    assert result.startswith(KEYED_PREFIX)
    assert len(result) == len(KEYED_PREFIX) + 64


def test_a_pseudonym_key_never_shows_its_bytes() -> None:
    """The key the gate carries says ``<redacted>`` wherever it is printed
    (a dataclass repr, an f-string, a traceback's locals) and is never pickled; its
    identifiers are those of ``keyed_identifier`` under the same bytes."""
    secret = bytes(range(32))
    key = PseudonymKey(secret)
    assert key.identifier("tenant", "acme") == keyed_identifier(secret, "tenant", "acme")
    shown = [repr(key), str(key), f"{key}", repr({"settings": key})]
    assert all("<redacted>" in text for text in shown)
    for text in shown:
        assert secret.hex() not in text
        assert repr(secret)[2:-1][:16] not in text
    with pytest.raises(TypeError):
        pickle.dumps(key)
    with pytest.raises(KeyedIdentifierError):
        PseudonymKey(secret[:31])
