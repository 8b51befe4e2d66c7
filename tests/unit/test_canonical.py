"""Canonical JSON and identities (smf_assurance/subjects/canonical.py).

Properties: the golden vectors hold; canonical bytes are a fixed point of
parse -> re-encode; equivalent values (NFC vs NFD, any key order) give the
same bytes; keys follow UTF-16 code-unit order; floats, unsafe integers,
lone surrogates and excessive nesting have no canonical form; and the
``struct_identity`` fast path always equals the full ``identity_of`` path,
as the plain-value path of ``canonical_bytes`` always equals the full walk.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smf_assurance.subjects import canonical
from smf_assurance.subjects.canonical import (
    MAX_DEPTH,
    SAFE_INTEGER_MAX,
    CanonicalJSONError,
    canonical_bytes,
    canonical_value,
    identity_of,
    is_identity,
    parse_canonical,
    sha256_identity,
    struct_identity,
    validated,
)
from smf_assurance.subjects.envelope import OperationEnvelope
from tests.support.builders import envelope_dict
from tests.support.canonical import _SPECIAL, JSON_VALUES, SAFE_INT, TEXT, _nfc, _unique_after_nfc

VECTORS = Path(__file__).parents[1] / "vectors"
CANONICAL_VECTORS = json.loads((VECTORS / "canonical.json").read_text(encoding="ascii"))

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


# --- strategies ---------------------------------------------------------------

# Text that exercises the interesting cases: ASCII (with control characters
# and DEL), combining marks (non-NFC sequences), composition exclusions,
# BMP private use and astral characters (UTF-16 ordering), U+2028.


def _map_strings(value: Any, f: Any) -> Any:
    if isinstance(value, str):
        return f(value)
    if isinstance(value, dict):
        return {f(k): _map_strings(v, f) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, f) for v in value]
    return value


def _utf16_units(key: str) -> list[int]:
    """UTF-16 code units computed by hand (the oracle for JCS key order)."""
    units: list[int] = []
    for ch in key:
        cp = ord(ch)
        if cp < 0x10000:
            units.append(cp)
        else:
            cp -= 0x10000
            units.extend((0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)))
    return units


def _all_objects(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for v in value.values():
            found.extend(_all_objects(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(_all_objects(v))
    return found


# --- golden vectors -----------------------------------------------------------


def test_vector_files_are_pure_ascii() -> None:
    """Non-ASCII is escaped, so no tool can NFC-normalize a decomposed vector."""
    for path in sorted(VECTORS.glob("*.json")):
        assert path.read_bytes().isascii(), path.name


@pytest.mark.parametrize(
    "required",
    [
        "keys_utf16_order_differs_from_code_point_order",
        "nfc_precomposed_e_acute",
        "nfc_decomposed_e_acute",
        "nested_lists_and_objects",
        "escapes_short_forms",
        "escapes_other_control_characters_lower_case_hex",
        "line_and_paragraph_separators_not_escaped",
        "del_not_escaped",
        "max_safe_integer",
        "min_safe_integer",
        "integer_above_safe_range",
        "integer_below_safe_range",
        "float_rejected",
        "nan_rejected",
        "duplicate_keys_after_nfc",
        "lone_high_surrogate",
        "empty_object",
        "empty_array",
        "nesting_too_deep_arrays",
    ],
)
def test_required_canonical_vectors_are_present(required: str) -> None:
    assert required in {v["name"] for v in CANONICAL_VECTORS["encode"]}


def test_vector_names_are_unique() -> None:
    names = [v["name"] for v in CANONICAL_VECTORS["encode"] + CANONICAL_VECTORS["verify"]]
    assert len(names) == len(set(names))


def _encode_id(vector: dict[str, Any]) -> str:
    return str(vector["name"])


@pytest.mark.claim("canonical-identities.jcs-bytes")
@pytest.mark.parametrize("vector", CANONICAL_VECTORS["encode"], ids=_encode_id)
def test_encode_vector(vector: dict[str, Any]) -> None:
    value = json.loads(vector["input"])
    if vector.get("error"):
        assert vector["reason"]
        with pytest.raises(CanonicalJSONError):
            canonical_bytes(value)
        with pytest.raises(CanonicalJSONError):
            identity_of(value)
        return
    expected = vector["canonical"].encode("utf-8")
    # The file is self-consistent: the identity is SHA-256 of the expected text.
    assert vector["identity"] == "sha256:" + hashlib.sha256(expected).hexdigest()
    assert canonical_bytes(value) == expected
    assert identity_of(value) == vector["identity"]
    # The expected text is itself canonical.
    assert canonical_bytes(parse_canonical(expected)) == expected


@pytest.mark.parametrize("vector", CANONICAL_VECTORS["verify"], ids=_encode_id)
def test_verify_vector(vector: dict[str, Any]) -> None:
    raw = vector["input"].encode("utf-8")
    if vector.get("error"):
        with pytest.raises(CanonicalJSONError):
            parse_canonical(raw)
        return
    assert vector["canonical"] is True
    assert canonical_bytes(parse_canonical(raw)) == raw
    assert canonical_bytes(parse_canonical(vector["input"])) == raw


def test_precomposed_and_decomposed_vectors_share_an_identity() -> None:
    by_name = {v["name"]: v for v in CANONICAL_VECTORS["encode"]}
    assert (
        by_name["nfc_precomposed_e_acute"]["identity"]
        == by_name["nfc_decomposed_e_acute"]["identity"]
    )


# --- canonical_bytes: rules -------------------------------------------------------


@pytest.mark.claim("canonical-identities.jcs-bytes")
def test_utf16_key_order_differs_from_python_sort() -> None:
    """JCS orders by UTF-16 code units; Python's str sort would put U+E000 first."""
    value = {"\ue000": 1, "\U0001f600": 2}
    assert sorted(value) == ["\ue000", "\U0001f600"]  # the trap
    assert canonical_bytes(value) == '{"\U0001f600":2,"\ue000":1}'.encode()


@pytest.mark.claim("canonical-identities.jcs-bytes")
@pytest.mark.parametrize(
    "value",
    [
        1.5,
        0.0,
        -0.0,
        1.0,
        float("nan"),
        float("inf"),
        float("-inf"),
        [1, 2.5],
        {"a": {"b": [1e300]}},
        SAFE_INTEGER_MAX + 1,
        -SAFE_INTEGER_MAX - 1,
        [2**64],
        {"k": -(2**63)},
    ],
)
def test_non_integers_and_unsafe_integers_are_rejected(value: Any) -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_bytes(value)


def test_error_names_the_location() -> None:
    with pytest.raises(CanonicalJSONError, match=r"at \$\.a\[1\]"):
        canonical_bytes({"a": [1, 0.5]})
    with pytest.raises(CanonicalJSONError, match="NaN or infinity"):
        canonical_bytes(float("nan"))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, r"^float is not allowed at \$; use integers"),
        (float("inf"), r"^NaN or infinity is not allowed at \$"),
        (SAFE_INTEGER_MAX + 1, r"^integer outside the I-JSON safe range at \$"),
        ([-SAFE_INTEGER_MAX - 1], r"^integer outside the I-JSON safe range at \$\[0\]"),
    ],
)
def test_a_refusal_names_the_rule_the_value_breaks(value: Any, reason: str) -> None:
    """Whoever reads the refusal (an operator, a corpus author) is told which rule the
    value breaks, not a later check's words for it ("has no JSON form")."""
    with pytest.raises(CanonicalJSONError, match=reason):
        canonical_bytes(value)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"1.0", "float 1.0 is not allowed; use integers"),
        (b"[1E2]", "float 1E2 is not allowed; use integers"),
        (b"NaN", "NaN is not allowed"),
        (b"[-Infinity]", "-Infinity is not allowed"),
    ],
)
def test_parsing_names_a_float_or_a_constant_as_such(raw: bytes, reason: str) -> None:
    """A signed text holding a float or NaN is refused for that, not as merely
    "not in canonical form"."""
    with pytest.raises(CanonicalJSONError, match=reason):
        parse_canonical(raw)


def test_booleans_are_not_integers() -> None:
    assert canonical_bytes([True, False, 1, 0]) == b"[true,false,1,0]"


@pytest.mark.parametrize(
    "value",
    [b"bytes", bytearray(b"x"), {1, 2}, object(), {1: "non-string key"}, {("a",): 1}],
)
def test_values_without_a_json_form_are_rejected(value: Any) -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_bytes(value)


def test_tuples_are_arrays() -> None:
    assert canonical_bytes((1, ("a",))) == b'[1,["a"]]'


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", {"\ud83d": 1}, ["ok", {"k": "\udc00"}]])
def test_lone_surrogates_are_rejected(value: Any) -> None:
    with pytest.raises(CanonicalJSONError, match="lone surrogate"):
        canonical_bytes(value)


def test_duplicate_keys_after_nfc_are_rejected() -> None:
    with pytest.raises(CanonicalJSONError, match="duplicate key"):
        canonical_bytes({"caf\u00e9": 1, "cafe\u0301": 2})


def _nested_lists(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _nested_objects(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value}
    return value


@pytest.mark.parametrize("prepare", [canonical_bytes, canonical_value])
def test_depth_limit(prepare: Callable[[Any], Any]) -> None:
    """A scalar MAX_DEPTH containers deep is accepted; one more level is refused, by
    the bytes and by the value the compiler reads corpora through alike."""
    assert canonical_bytes(_nested_lists(MAX_DEPTH)).startswith(b"[" * MAX_DEPTH + b"0")
    prepare(_nested_lists(MAX_DEPTH))
    prepare(_nested_objects(MAX_DEPTH))
    for value in (_nested_lists(MAX_DEPTH + 1), _nested_objects(MAX_DEPTH + 1)):
        with pytest.raises(CanonicalJSONError, match="nesting deeper"):
            prepare(value)


@pytest.mark.parametrize("leaf", ["leaf", "feuille-\u00e9"], ids=["fast-path", "full-walk"])
def test_the_depth_limit_is_the_same_on_the_fast_path_and_the_full_walk(leaf: str) -> None:
    """A value of ASCII text takes the fast path and one with any other text the full
    walk; both accept exactly MAX_DEPTH levels, so what is signed never depends on
    which path encoded it."""
    value: Any = leaf
    for _ in range(MAX_DEPTH):
        value = {"k": value}
    assert canonical_bytes(value).endswith(
        json.dumps(leaf, ensure_ascii=False).encode() + b"}" * MAX_DEPTH
    )
    with pytest.raises(CanonicalJSONError, match="nesting deeper"):
        canonical_bytes([value])


class _Bounded(msgspec.Struct, frozen=True):
    count: Annotated[int, msgspec.Meta(ge=1)]


def test_a_struct_built_in_process_obeys_its_contract_before_it_is_trusted() -> None:
    """msgspec checks a Struct's bounds when it decodes, not when code builds one:
    ``validated`` applies them to a Struct built in process (a binding, a manifest)."""
    assert validated(_Bounded(1)) == _Bounded(1)
    with pytest.raises(msgspec.ValidationError, match=">= 1"):
        validated(_Bounded(0))


def test_hostile_nesting_is_refused_without_crashing() -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_bytes(_nested_lists(10_000))
    with pytest.raises(CanonicalJSONError):
        parse_canonical(b"[" * 200_000 + b"]" * 200_000)


# --- parse_canonical ----------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1}',
        b'{"b":1,"a":2}',
        b'{"a":1,"a":1}',
        b" {}",
        b"{}\n",
        b'"\\u00e9"',
        '"cafe\u0301"'.encode(),
        b'"\\u001F"',
        b'"\\/"',
        b"1.0",
        b"1E2",
        b"-0",
        b"NaN",
        b"-Infinity",
        b"01",
        b"\xef\xbb\xbf{}",
        b'"\xff"',
        b'"\xed\xa0\x80"',
        b"",
        b"{",
        b"9007199254740992",
    ],
)
def test_parse_canonical_rejects_non_canonical_input(raw: bytes) -> None:
    with pytest.raises(CanonicalJSONError):
        parse_canonical(raw)


def test_parse_canonical_rejects_a_str_with_a_lone_surrogate() -> None:
    """A ``str`` input that cannot be UTF-8 is non-canonical, not a crash of another type."""
    with pytest.raises(CanonicalJSONError):
        parse_canonical('"\ud800"')


def test_parse_canonical_returns_the_value() -> None:
    assert parse_canonical(b'{"a":[1,true,null,"x"]}') == {"a": [1, True, None, "x"]}
    assert parse_canonical('"caf\u00e9"') == "caf\u00e9"


# --- properties -----------------------------------------------------------------


@SETTINGS
@given(JSON_VALUES)
def test_canonical_bytes_is_a_fixed_point_of_parse_and_reencode(value: Any) -> None:
    raw = canonical_bytes(value)
    parsed = parse_canonical(raw)
    assert canonical_bytes(parsed) == raw
    assert parsed == canonical_value(value)
    assert canonical_bytes(canonical_value(value)) == raw
    assert identity_of(value) == sha256_identity(raw) == identity_of(parsed)
    raw.decode("utf-8")  # always valid UTF-8


@pytest.mark.claim("canonical-identities.jcs-bytes")
@SETTINGS
@given(JSON_VALUES)
def test_equivalent_spellings_give_identical_bytes(value: Any) -> None:
    """NFD and NFC spellings of every string, and any key order, give the same bytes."""
    decomposed = _map_strings(value, _nfd)
    if any(not _unique_after_nfc(d) for d in _all_objects(decomposed)):
        return
    reordered = _map_strings(value, lambda s: s)

    def reverse_keys(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: reverse_keys(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reverse_keys(x) for x in v]
        return v

    expected = canonical_bytes(value)
    assert canonical_bytes(decomposed) == expected
    assert canonical_bytes(reverse_keys(reordered)) == expected


@SETTINGS
@given(st.dictionaries(TEXT, st.integers(0, 3), min_size=2, max_size=8).filter(_unique_after_nfc))
def test_keys_are_ordered_by_utf16_code_units(value: dict[str, int]) -> None:
    parsed = json.loads(canonical_bytes(value))
    keys = list(parsed)
    assert keys == sorted((_nfc(k) for k in value), key=_utf16_units)


@SETTINGS
@given(JSON_VALUES)
def test_canonical_output_has_no_insignificant_whitespace(value: Any) -> None:
    raw = canonical_bytes(value)
    assert raw == json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8"
    )


# --- canonical_bytes: the plain-value path must equal the full walk ----------------


def _full_walk(value: Any) -> bytes:
    """What ``canonical_bytes`` computes for every value without its plain-value path."""
    return canonical._ENCODER.encode(canonical._normalize(value, "$", 0)).encode("utf-8")


ASCII_TEXT = st.text(alphabet=st.characters(codec="ascii"), max_size=12)
PLAIN_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), SAFE_INT, ASCII_TEXT),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(ASCII_TEXT, children, max_size=4),
    ),
    max_leaves=20,
)


@SETTINGS
@given(st.one_of(PLAIN_VALUES, JSON_VALUES))
def test_canonical_bytes_equals_the_full_walk(value: Any) -> None:
    """ASCII keys in code-point order are in UTF-16 order, and an ASCII string is NFC:
    the plain path (taken for ``PLAIN_VALUES``) gives the walk's bytes exactly."""
    assert canonical_bytes(value) == _full_walk(value)


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ({"b": [1, "x", None, True], "a": {"\x7f\x00": -(2**53 - 1)}}, True),
        (("a", 1), True),
        ({"k": "caf\u00e9"}, False),
        ({"caf\u00e9": 1}, False),
        ({"k": 1.0}, False),
        ({"k": 2**53}, False),
        ({1: "x"}, False),
        (b"x", False),
        (MappingProxyType({"a": 1}), False),
    ],
)
def test_only_plain_values_skip_the_walk(value: Any, plain: bool) -> None:
    """A non-ASCII string, a float, an unsafe integer, a non-string key, bytes or a
    mapping that is not a dict takes the full walk, which normalizes or refuses it."""
    assert canonical._is_plain(value, 0) is plain


def test_the_safe_range_is_inclusive_on_the_full_walk_too() -> None:
    """+-(2**53 - 1) are canonical wherever they are: here beside a non-ASCII key,
    which sends the value down the full walk rather than the plain path."""
    value = {"caf\u00e9": [SAFE_INTEGER_MAX, -SAFE_INTEGER_MAX]}
    assert not canonical._is_plain(value, 0)
    expected = '{"caf\u00e9":[9007199254740991,-9007199254740991]}'.encode()
    assert canonical_bytes(value) == expected


def test_the_plain_path_keeps_the_nesting_bound() -> None:
    deep: Any = 0
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    assert not canonical._is_plain(deep, 0)
    with pytest.raises(CanonicalJSONError, match="nesting deeper"):
        canonical_bytes(deep)


# --- struct_identity: the fast path must equal the full path ----------------------

_VOCABULARY = {
    "capability": ["external.transmit", "document.read", "unknown"],
    "effects.persistence": ["none", "local", "external_persistent", "unknown"],
    "effects.reversibility": ["full", "limited", "none", "unknown"],
    "destination.channel": ["email", "web", "none", "unknown"],
    "destination.locality": ["internal", "external", "unknown"],
    "data.classification": ["public", "privileged", "unknown"],
    "data.injection_taint": ["clear", "tainted", "unknown"],
    "workflow.citation_verification": ["pending", "verified", "unknown"],
    "runtime.surface": ["tool_call", "stream", "mcp"],
}
_NAME_FIELDS = [
    "professional.domain",
    "professional.tenant_id",
    "professional.organization_id",
    "professional.matter_id",
    "professional.actor_id",
    "runtime.runtime_id",
    "runtime.runtime_version",
    "runtime.adapter_id",
    "runtime.native_tool",
]
_HASH = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)
NAME = st.one_of(
    st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=10),
    st.text(alphabet=st.sampled_from(_SPECIAL + "az"), min_size=1, max_size=6),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
)


@st.composite
def envelopes(draw: st.DrawFn) -> OperationEnvelope:
    """Random valid envelopes whose strings may be non-ASCII and non-NFC.

    Built with ``msgspec.convert`` directly (not ``decode_envelope``), so the
    strings are kept exactly as drawn: the full path must normalize them.
    """
    overrides: dict[str, Any] = {
        path: draw(st.sampled_from(values)) for path, values in _VOCABULARY.items()
    }
    overrides.update({path: draw(NAME) for path in _NAME_FIELDS})
    overrides["effects.egress"] = draw(st.booleans())
    overrides["workflow.legal_hold"] = draw(st.booleans())
    overrides["professional.actor_roles"] = draw(st.lists(NAME, max_size=3))
    overrides["professional.governing_laws"] = draw(st.lists(NAME, max_size=3))
    overrides["destination.target_identity_hash"] = draw(_HASH)
    overrides["data.content_hash"] = draw(_HASH)
    if draw(st.booleans()):
        overrides["data.redaction_status"] = "complete"
        overrides["data.redaction_evidence"] = draw(NAME)
    else:
        overrides["data.redaction_status"] = draw(st.sampled_from(["none", "pending", "unknown"]))
    return msgspec.convert(envelope_dict(overrides), OperationEnvelope)


@SETTINGS
@given(envelopes())
def test_struct_identity_equals_identity_of_builtins(envelope: OperationEnvelope) -> None:
    assert struct_identity(envelope) == identity_of(msgspec.to_builtins(envelope))


def test_struct_identity_fast_path_and_full_path_both_exercised() -> None:
    ascii_env = msgspec.convert(envelope_dict(), OperationEnvelope)
    assert msgspec.json.encode(ascii_env, order="sorted").isascii()
    assert struct_identity(ascii_env) == identity_of(msgspec.to_builtins(ascii_env))

    nfd = msgspec.convert(
        envelope_dict({"professional.matter_id": "cafe\u0301"}), OperationEnvelope
    )
    nfc = msgspec.convert(envelope_dict({"professional.matter_id": "caf\u00e9"}), OperationEnvelope)
    assert not msgspec.json.encode(nfd, order="sorted").isascii()
    assert struct_identity(nfd) == struct_identity(nfc) == identity_of(msgspec.to_builtins(nfc))


ASCII_TEXT = st.text(alphabet=st.characters(codec="ascii"), max_size=10)
ASCII_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), SAFE_INT, ASCII_TEXT),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(ASCII_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(ASCII_JSON)
def test_struct_identity_equals_identity_of_for_plain_ascii_values(value: Any) -> None:
    """The fast path (pure ASCII output) must escape and order exactly like JCS."""
    assert struct_identity(value) == identity_of(value)


@SETTINGS
@given(st.dictionaries(TEXT, TEXT, max_size=5).filter(_unique_after_nfc))
def test_struct_identity_equals_identity_of_for_non_ascii_dicts(value: dict[str, str]) -> None:
    assert struct_identity(value) == identity_of(value)


# --- identities -------------------------------------------------------------------


def test_sha256_identity_known_answer() -> None:
    assert sha256_identity(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert identity_of({}) == sha256_identity(b"{}")


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("sha256:" + "0" * 64, True),
        ("sha256:" + "af" * 32, True),
        ("sha256:" + "AF" * 32, False),
        ("sha256:" + "0" * 63, False),
        ("sha256:" + "0" * 65, False),
        ("sha512:" + "0" * 64, False),
        ("0" * 64, False),
        (" sha256:" + "0" * 64, False),
        ("sha256:" + "0" * 64 + "\n", False),
        ("sha256:" + "0" * 64 + " ", False),
        ("", False),
    ],
)
def test_is_identity(text: str, valid: bool) -> None:
    assert is_identity(text) is valid
