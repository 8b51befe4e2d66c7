"""DSSE envelopes (smf_assurance/subjects/dsse.py): one test per threat the verifier stops."""

from __future__ import annotations

import base64
import json
from typing import Any, Final

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.dsse import (
    MAX_ENVELOPE_BYTES,
    MAX_SIGNATURES,
    BadSignatureError,
    BelowThresholdError,
    Envelope,
    EnvelopeTooLargeError,
    MalformedEnvelopeError,
    MalformedPayloadError,
    PayloadTypeMismatchError,
    Signature,
    SignatureError,
    UnknownSignerError,
    Verified,
    decode_envelope,
    encode_envelope,
    open_struct,
    pae,
    reason_code,
    sign,
    sign_struct,
    verify,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey, generate_signing_key

PAYLOAD_TYPE = "application/vnd.smf.test+json"
PAYLOAD = b'{"action":"transmit"}'

ALICE = generate_signing_key()
BOB = generate_signing_key()
CAROL = generate_signing_key()
MALLORY = generate_signing_key()


def _trusted(*keys: SigningKey) -> dict[str, VerifyKey]:
    return {key.key_id: key.verify_key for key in keys}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _sig_bytes(envelope: Envelope, index: int = 0) -> bytes:
    return base64.b64decode(envelope.signatures[index].sig)


def _with_signatures(envelope: Envelope, *signatures: Signature) -> Envelope:
    return msgspec.structs.replace(envelope, signatures=signatures)


def _envelope_json(envelope: Envelope) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(encode_envelope(envelope))
    return document


# --- PAE ---------------------------------------------------------------------


def test_pae_matches_the_published_dsse_example() -> None:
    """protocol.md, "Test Vectors"."""
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("é", "ü".encode()) == b"DSSEv1 2 \xc3\xa9 2 \xc3\xbc"


def test_pae_of_empty_body() -> None:
    assert pae("t", b"") == b"DSSEv1 1 t 0 "


def test_pae_framing_is_unambiguous() -> None:
    assert pae("a b", b"c") != pae("a", b"b c")


# --- sign and verify ---------------------------------------------------------


def test_round_trip_through_bytes() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    decoded = decode_envelope(encode_envelope(envelope))

    verified = verify(decoded, _trusted(ALICE), expected_payload_type=PAYLOAD_TYPE)

    assert decoded.envelope == envelope
    assert verified == Verified(
        payload_type=PAYLOAD_TYPE, payload=PAYLOAD, key_ids=frozenset({ALICE.key_id})
    )


def test_envelope_uses_dsse_field_names() -> None:
    document = _envelope_json(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]))
    assert list(document) == ["payload", "payloadType", "signatures"]
    assert document["payload"] == _b64(PAYLOAD)
    assert document["payloadType"] == PAYLOAD_TYPE
    assert [list(s) for s in document["signatures"]] == [["keyid", "sig"]]
    assert document["signatures"][0]["keyid"] == ALICE.key_id


def test_signature_is_over_pae_of_type_and_payload() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    assert ALICE.verify_key.verify(pae(PAYLOAD_TYPE, PAYLOAD), _sig_bytes(envelope))


def test_empty_payload_signs_and_verifies() -> None:
    envelope = decode_envelope(encode_envelope(sign(PAYLOAD_TYPE, b"", [ALICE])))
    assert verify(envelope, _trusted(ALICE)).payload == b""


def test_url_safe_base64_is_accepted() -> None:
    """protocol.md: verifiers MUST accept standard or URL-safe base64."""
    payload = b"\xfb\xff\xbf" * 4
    envelope = sign(PAYLOAD_TYPE, payload, [ALICE])
    url_safe = msgspec.structs.replace(
        envelope,
        payload=base64.urlsafe_b64encode(payload).decode(),
        signatures=(
            Signature(
                keyid=ALICE.key_id,
                sig=base64.urlsafe_b64encode(_sig_bytes(envelope)).decode(),
            ),
        ),
    )
    assert "-" in url_safe.payload or "_" in url_safe.payload
    assert verify(decode_envelope(encode_envelope(url_safe)), _trusted(ALICE)).payload == payload


@pytest.mark.parametrize(
    ("standard", "url_safe"),
    [("+", "-"), ("/", "_")],
    ids=["slash-with-dash", "plus-with-underscore"],
)
def test_a_signed_payload_spelled_in_both_alphabets_is_refused(
    standard: str, url_safe: str
) -> None:
    """One signature, one spelling (``b64decode``): a validly signed payload whose
    base64 mixes the alphabets, keeping one standard character (``/`` or ``+``)
    beside URL-safe ones, is not a third spelling of the same message."""
    payload = b"\xfb\xff\xbf" * 4  # standard base64 "+/+/...": both special characters
    envelope = sign(PAYLOAD_TYPE, payload, [ALICE])
    assert "+" in envelope.payload
    assert "/" in envelope.payload
    mixed = envelope.payload.replace(standard, url_safe)
    with pytest.raises(MalformedEnvelopeError, match="mixes standard and URL-safe"):
        decode_envelope(encode_envelope(msgspec.structs.replace(envelope, payload=mixed)))


def test_verified_key_ids_lists_every_distinct_verifying_key() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE, BOB, CAROL])
    verified = verify(envelope, _trusted(ALICE, BOB, CAROL), threshold=2)
    assert verified.key_ids == {ALICE.key_id, BOB.key_id, CAROL.key_id}


@pytest.mark.parametrize(
    "signers",
    [[ALICE, BOB], [BOB, CAROL], [ALICE, CAROL], [CAROL, ALICE, BOB]],
)
def test_threshold_two_of_three(signers: list[SigningKey]) -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, signers)
    verified = verify(envelope, _trusted(ALICE, BOB, CAROL), threshold=2)
    assert verified.key_ids == {s.key_id for s in signers}


def test_threshold_two_of_three_with_one_signer_fails() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [BOB])
    with pytest.raises(
        BelowThresholdError, match="1 distinct trusted keys verified, threshold is 2"
    ):
        verify(envelope, _trusted(ALICE, BOB, CAROL), threshold=2)


def test_threshold_above_roster_size_is_a_refusal_not_a_crash() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    with pytest.raises(BelowThresholdError):
        verify(envelope, _trusted(ALICE), threshold=2)


@pytest.mark.parametrize("threshold", [0, -1])
def test_threshold_below_one_is_a_caller_error(threshold: int) -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    with pytest.raises(ValueError, match="threshold"):
        verify(envelope, _trusted(ALICE), threshold=threshold)


# --- threats -----------------------------------------------------------------


def test_all_refusals_are_signature_errors() -> None:
    for error in (
        MalformedEnvelopeError,
        EnvelopeTooLargeError,
        MalformedPayloadError,
        PayloadTypeMismatchError,
        BadSignatureError,
        BelowThresholdError,
        UnknownSignerError,
    ):
        assert issubclass(error, SignatureError)


def test_tampered_payload_is_a_bad_signature() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    tampered = msgspec.structs.replace(envelope, payload=_b64(b'{"action":"delete"}'))
    with pytest.raises(BadSignatureError):
        verify(tampered, _trusted(ALICE))


def test_tampered_payload_type_is_a_bad_signature() -> None:
    """The type is inside the PAE, so relabelling breaks the signature."""
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    relabelled = msgspec.structs.replace(envelope, payload_type="application/vnd.smf.other+json")
    with pytest.raises(BadSignatureError):
        verify(relabelled, _trusted(ALICE))
    with pytest.raises(BadSignatureError):
        verify(relabelled, _trusted(ALICE), expected_payload_type=relabelled.payload_type)


@pytest.mark.parametrize("position", [0, 31, 32, 63])
def test_tampered_signature_byte_is_a_bad_signature(position: int) -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    raw = bytearray(_sig_bytes(envelope))
    raw[position] ^= 0x01
    tampered = _with_signatures(envelope, Signature(keyid=ALICE.key_id, sig=_b64(bytes(raw))))
    with pytest.raises(BadSignatureError):
        verify(tampered, _trusted(ALICE))


def test_signature_by_another_key_under_a_trusted_keyid_is_bad() -> None:
    """keyid is an unauthenticated hint: claiming Alice's id does not make it Alice's."""
    forged = sign(PAYLOAD_TYPE, PAYLOAD, [MALLORY])
    claimed = _with_signatures(forged, Signature(keyid=ALICE.key_id, sig=forged.signatures[0].sig))
    with pytest.raises(BadSignatureError):
        verify(claimed, _trusted(ALICE))


def test_same_key_signing_twice_counts_once() -> None:
    """Threshold attack: one key's signature repeated must not count as two."""
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    doubled = _with_signatures(envelope, envelope.signatures[0], envelope.signatures[0])
    with pytest.raises(BelowThresholdError):
        verify(doubled, _trusted(ALICE, BOB), threshold=2)
    assert verify(doubled, _trusted(ALICE, BOB)).key_ids == {ALICE.key_id}


def test_bad_signature_then_good_one_from_same_key_verifies() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    bad = Signature(keyid=ALICE.key_id, sig=_b64(b"\x00" * 64))
    mixed = _with_signatures(envelope, bad, envelope.signatures[0])
    assert verify(mixed, _trusted(ALICE)).key_ids == {ALICE.key_id}


def test_one_key_under_two_ids_is_refused() -> None:
    """A key listed under a second id would be counted twice (go-tuf
    GHSA-3633-5h82-39pq): the trusted map must use derived key ids."""
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    alias = Signature(keyid="alias", sig=envelope.signatures[0].sig)
    doubled = _with_signatures(envelope, envelope.signatures[0], alias)
    trusted = {ALICE.key_id: ALICE.verify_key, "alias": ALICE.verify_key}
    with pytest.raises(ValueError, match="count twice"):
        verify(doubled, trusted, threshold=2)


def test_unknown_signer_is_refused() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [MALLORY])
    with pytest.raises(UnknownSignerError):
        verify(envelope, _trusted(ALICE, BOB))


def test_envelope_without_signatures_is_an_unknown_signer() -> None:
    stripped = _with_signatures(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]))
    decoded = decode_envelope(encode_envelope(stripped))
    with pytest.raises(UnknownSignerError):
        verify(decoded, _trusted(ALICE))


def test_unknown_signer_is_ignored_alongside_trusted_ones() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [MALLORY, ALICE])
    verified = verify(envelope, _trusted(ALICE))
    assert verified.key_ids == {ALICE.key_id}


def test_unknown_signer_does_not_count_toward_threshold() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [MALLORY, ALICE])
    with pytest.raises(BelowThresholdError):
        verify(envelope, _trusted(ALICE, BOB), threshold=2)


def test_payload_type_mismatch_is_refused_after_signatures() -> None:
    """Type confusion: a genuine approval resolution replayed as an execute order."""
    envelope = sign("application/vnd.smf.approval-resolution+json", PAYLOAD, [ALICE])
    with pytest.raises(PayloadTypeMismatchError, match="expected"):
        verify(envelope, _trusted(ALICE), expected_payload_type="application/vnd.smf.execute+json")


def test_bad_signature_is_reported_before_payload_type() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [MALLORY])
    forged = _with_signatures(
        envelope, Signature(keyid=ALICE.key_id, sig=envelope.signatures[0].sig)
    )
    with pytest.raises(BadSignatureError):
        verify(forged, _trusted(ALICE), expected_payload_type="application/vnd.smf.other+json")


# --- malformed and oversized input -------------------------------------------


def _encoded_with(**changes: Any) -> bytes:
    document = _envelope_json(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]))
    document.update(changes)
    return json.dumps(document).encode()


def _encoded_with_sig(sig: str, keyid: str | None = None) -> bytes:
    return _encoded_with(
        signatures=[{"keyid": ALICE.key_id if keyid is None else keyid, "sig": sig}]
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"not json", "not a DSSE envelope", id="not-json"),
        pytest.param(b"[]", "not a DSSE envelope", id="not-an-object"),
        pytest.param(_encoded_with(payload="not base64!"), "payload is not valid base64", id="bad"),
        pytest.param(_encoded_with(payload="aGk"), "payload is not valid base64", id="no-pad"),
        pytest.param(_encoded_with(payload="aGl="), "payload is not canonical", id="pad-bits"),
        pytest.param(_encoded_with(payload="ab+-"), "mixes standard and URL-safe", id="mixed"),
        pytest.param(_encoded_with(payload="aGk=\n"), "payload is not valid base64", id="newline"),
        pytest.param(_encoded_with(payloadType=""), "payloadType", id="empty-type"),
        pytest.param(_encoded_with(extra=1), "extra", id="unknown-field"),
        pytest.param(_encoded_with_sig("@@@@"), r"signatures\[0\].sig is not valid base64", id="s"),
        pytest.param(_encoded_with_sig(_b64(b"\x00" * 63)), "is 63 bytes, not 64", id="short"),
        pytest.param(_encoded_with_sig(_b64(b"\x00" * 65)), "is 65 bytes, not 64", id="long"),
        pytest.param(_encoded_with_sig(_b64(b"\x00" * 64), keyid=""), "keyid", id="empty-keyid"),
        pytest.param(
            _encoded_with(signatures=[{"keyid": "k", "sig": _b64(b"\x00" * 64), "cert": ""}]),
            "cert",
            id="unknown-signature-field",
        ),
    ],
)
def test_malformed_envelope_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(MalformedEnvelopeError, match=message):
        decode_envelope(data)


def test_malformed_signature_from_an_unknown_key_is_still_an_error() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    junk = Signature(keyid=MALLORY.key_id, sig=_b64(b"\x00" * 10))
    with pytest.raises(MalformedEnvelopeError, match="10 bytes"):
        verify(_with_signatures(envelope, envelope.signatures[0], junk), _trusted(ALICE))


def test_verify_checks_base64_of_a_constructed_envelope() -> None:
    envelope = msgspec.structs.replace(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]), payload="%%%%")
    with pytest.raises(MalformedEnvelopeError, match="payload is not valid base64"):
        verify(envelope, _trusted(ALICE))


def test_payload_type_with_lone_surrogate_is_malformed() -> None:
    envelope = msgspec.structs.replace(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]), payload_type="\ud800")
    with pytest.raises(MalformedEnvelopeError, match="UTF-8"):
        verify(envelope, _trusted(ALICE))


def test_too_many_signatures_are_refused() -> None:
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    flood = _with_signatures(envelope, *([envelope.signatures[0]] * (MAX_SIGNATURES + 1)))
    with pytest.raises(MalformedEnvelopeError, match="more than"):
        decode_envelope(encode_envelope(flood))
    with pytest.raises(MalformedEnvelopeError, match="more than"):
        verify(flood, _trusted(ALICE))


def test_the_signature_bound_itself_is_accepted() -> None:
    """Exactly ``MAX_SIGNATURES`` signatures decode and sign: the bound refuses more,
    not as many."""
    envelope = sign(PAYLOAD_TYPE, PAYLOAD, [ALICE])
    full = _with_signatures(envelope, *([envelope.signatures[0]] * MAX_SIGNATURES))
    assert len(decode_envelope(encode_envelope(full)).raw_signatures) == MAX_SIGNATURES
    assert verify(full, _trusted(ALICE)).key_ids == {ALICE.key_id}
    signers = [SigningKey.from_seed(bytes([n + 1]) * 32) for n in range(MAX_SIGNATURES)]
    assert len(sign(PAYLOAD_TYPE, PAYLOAD, signers).signatures) == MAX_SIGNATURES


def test_any_non_empty_keyid_is_a_hint() -> None:
    """``keyid`` is required and only selects a key; one character is a keyid."""
    data = _encoded_with_sig(_b64(b"\x00" * 64), keyid="k")
    assert decode_envelope(data).envelope.signatures[0].keyid == "k"


def test_any_non_empty_payload_type_is_signed_and_verified() -> None:
    """The payload type is authenticated (it is inside the PAE), so a one-character
    type is as good as any; only an empty one is refused (``empty-type`` above)."""
    envelope = decode_envelope(encode_envelope(sign("x", PAYLOAD, [ALICE])))
    assert verify(envelope, _trusted(ALICE), expected_payload_type="x").payload == PAYLOAD


def test_oversized_input_is_refused_before_parsing() -> None:
    with pytest.raises(EnvelopeTooLargeError, match="more than"):
        decode_envelope(b"x" * (MAX_ENVELOPE_BYTES + 1))


def test_size_bound_is_configurable() -> None:
    data = encode_envelope(sign(PAYLOAD_TYPE, PAYLOAD, [ALICE]))
    assert decode_envelope(data, max_size=len(data)).payload_type == PAYLOAD_TYPE
    with pytest.raises(EnvelopeTooLargeError):
        decode_envelope(data, max_size=len(data) - 1)


# --- signing preconditions ---------------------------------------------------


def test_sign_requires_a_signer() -> None:
    with pytest.raises(ValueError, match="signer"):
        sign(PAYLOAD_TYPE, PAYLOAD, [])


def test_sign_requires_a_payload_type() -> None:
    with pytest.raises(ValueError, match="payload_type"):
        sign("", PAYLOAD, [ALICE])


def test_sign_refuses_the_same_key_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        sign(PAYLOAD_TYPE, PAYLOAD, [ALICE, ALICE])


def test_sign_refuses_more_than_the_signature_bound() -> None:
    with pytest.raises(ValueError, match="at most"):
        sign(PAYLOAD_TYPE, PAYLOAD, [ALICE] * (MAX_SIGNATURES + 1))


# --- property ------------------------------------------------------------------


@given(
    payload=st.binary(min_size=1, max_size=256),
    data=st.data(),
)
def test_any_single_byte_change_breaks_verification(payload: bytes, data: st.DataObject) -> None:
    envelope = sign(PAYLOAD_TYPE, payload, [ALICE])
    index = data.draw(st.integers(min_value=0, max_value=len(payload) - 1), label="index")
    replacement = data.draw(
        st.integers(min_value=0, max_value=255).filter(lambda b: b != payload[index]),
        label="replacement",
    )
    changed = payload[:index] + bytes([replacement]) + payload[index + 1 :]
    tampered = msgspec.structs.replace(envelope, payload=_b64(changed))

    assert verify(envelope, _trusted(ALICE)).payload == payload
    with pytest.raises(BadSignatureError):
        verify(tampered, _trusted(ALICE))


# --- structs -------------------------------------------------------------------


class Order(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    operation: str
    amount: int
    recipients: tuple[str, ...] = ()


class Report(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    score: float


ORDER_TYPE = "application/vnd.smf.execute-order+json"


def test_struct_round_trip_signs_canonical_bytes() -> None:
    order = Order(operation="transmit", amount=3, recipients=("court",))
    envelope = sign_struct(ORDER_TYPE, order, [ALICE])

    value, verified = open_struct(
        decode_envelope(encode_envelope(envelope)), _trusted(ALICE), Order, ORDER_TYPE
    )

    assert value == order
    assert verified.payload == canonical_bytes(msgspec.to_builtins(order))
    assert verified.payload == b'{"amount":3,"operation":"transmit","recipients":["court"]}'
    assert verified.key_ids == {ALICE.key_id}


class Free(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A payload type with a field of any shape (as a tool call's arguments are)."""

    value: Any


DEEP: Final = 100_000
"""Deeper than any decoder's stack: msgspec raises RecursionError well before."""


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{}", id="whole"),
        pytest.param('{{"payload":{},"payloadType":"t","signatures":[]}}', id="payload"),
        pytest.param('{{"payload":"","payloadType":{},"signatures":[]}}', id="payload-type"),
        pytest.param('{{"payload":"","payloadType":"t","signatures":[{}]}}', id="signature"),
        pytest.param('{{"payload":"","payloadType":"t","signatures":[],"x":{}}}', id="unknown"),
    ],
)
def test_an_envelope_nested_too_deep_is_malformed(template: str) -> None:
    """Nesting anywhere in the envelope is refused as a malformed envelope, never an
    internal error (the typed decode refuses the first value of the wrong shape)."""
    data = template.format(_nested(DEEP)).encode()
    assert len(data) <= MAX_ENVELOPE_BYTES
    with pytest.raises(MalformedEnvelopeError, match="not a DSSE envelope"):
        decode_envelope(data)


def test_a_signed_payload_nested_too_deep_is_malformed() -> None:
    """A validly signed payload whose value nests deeper than the decoder's stack is a
    malformed payload (a ``MalformedEnvelopeError``), refused like any other, never a
    ``RecursionError`` escaping to the caller; one nested within it opens."""
    shallow = sign(ORDER_TYPE, b'{"value":' + _nested(50).encode() + b"}", [ALICE])
    value, _ = open_struct(shallow, _trusted(ALICE), Free, ORDER_TYPE)
    assert isinstance(value.value, list)
    deep = sign(ORDER_TYPE, b'{"value":' + _nested(DEEP).encode() + b"}", [ALICE])
    decoded = decode_envelope(encode_envelope(deep))
    with pytest.raises(MalformedPayloadError, match="nests too deep for a Free"):
        open_struct(decoded, _trusted(ALICE), Free, ORDER_TYPE)


def test_open_struct_checks_type_and_threshold() -> None:
    envelope = sign_struct(ORDER_TYPE, Order(operation="x", amount=1), [ALICE])
    with pytest.raises(PayloadTypeMismatchError):
        open_struct(envelope, _trusted(ALICE), Order, "application/vnd.smf.other+json")
    with pytest.raises(BelowThresholdError):
        open_struct(envelope, _trusted(ALICE, BOB), Order, ORDER_TYPE, threshold=2)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param(
            b'{"amount":1,"operation":"x","recipients":[],"extra":1}', "extra", id="field"
        ),
        pytest.param(b'{"amount":"1","operation":"x"}', "Expected `int`", id="wrong-type"),
        pytest.param(b"not json", "not a valid Order", id="not-json"),
        pytest.param(
            b'{"amount":1,"operation":"x","operation":"y","recipients":[]}',
            "not the canonical",
            id="duplicate-key",
        ),
        pytest.param(
            b'{"operation":"x","amount":1,"recipients":[]}', "not the canonical", id="order"
        ),
        pytest.param(b'{"amount":1,"operation":"x"}', "not the canonical", id="default-omitted"),
    ],
)
def test_open_struct_refuses_signed_payload_that_is_not_the_canonical_struct(
    payload: bytes, message: str
) -> None:
    """A trusted signer's bytes are still parsed strictly: one value per signed byte string."""
    envelope = sign(ORDER_TYPE, payload, [ALICE])
    with pytest.raises(MalformedPayloadError, match=message):
        open_struct(envelope, _trusted(ALICE), Order, ORDER_TYPE)


def test_open_struct_refuses_a_payload_with_floats() -> None:
    envelope = sign(ORDER_TYPE, b'{"score":0.5}', [ALICE])
    with pytest.raises(MalformedPayloadError, match="float"):
        open_struct(envelope, _trusted(ALICE), Report, ORDER_TYPE)


def test_a_refusal_is_recorded_under_the_reason_its_endpoint_names() -> None:
    """``reason_code``: an oversized envelope is the endpoint's ``too_large`` where it
    tells the two apart, and malformed otherwise; a malformed one is named by what it
    should have been; every other refusal keeps its own code."""
    too_large = EnvelopeTooLargeError("too large")
    assert reason_code(too_large, "malformed_proposal", "proposal_too_large") == (
        "proposal_too_large"
    )
    assert reason_code(too_large, "malformed_proposal") == "malformed_proposal"
    malformed = MalformedEnvelopeError("not an envelope")
    assert reason_code(malformed, "malformed_order", "order_too_large") == "malformed_order"
    assert reason_code(MalformedPayloadError("x"), "malformed_order") == "malformed_order"
    assert reason_code(UnknownSignerError(), "malformed_order", "order_too_large") == (
        "unknown_signer"
    )
    assert reason_code(BadSignatureError(), "malformed_order") == "bad_signature"
