"""Every bound and shape of the passkey contract at its edge (``smf_assurance.subjects.passkeys``).

The bounds are written here as numbers, never read from the module, so a bound moved by one
fails a test: a session grant lasts at most twelve hours and is good from a minute before
its issue; a passkey-signed request is at most 64 KiB; a record names one to eight origins;
a credential id is 16 to 1366 base64url characters; a key, client data, authenticator data
or signature at most 8192; an origin at least one character.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
import pytest

from smf_assurance.pipeline.desks.signed import open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import ShowRequest
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.passkeys import (
    AssertionResponse,
    PasskeyAssertion,
    PasskeyDelegated,
    PasskeyRecord,
    PasskeyRecordError,
    PasskeySigned,
    SessionGrant,
    check_origin,
    credential_fingerprint,
    is_passkey_signed,
    open_passkey_signed,
    passkey_kind,
)
from smf_assurance.subjects.registry import KeyRegistry, decode_registry, encode_registry, entry_for
from tests.support.authenticator import (
    SoftAuthenticator,
    b64url,
    delegated_request,
    grant_payload,
)

pytestmark = pytest.mark.claim("approver-desk.passkey-signed-resolution")

ATTORNEY = "attorney-alex"
NOW = 1_000_000_000
HOURS_12 = 43_200_000
MINUTE = 60_000
KIB_64 = 65_536


def registry_of(device: SoftAuthenticator) -> KeyRegistry:
    entry = entry_for(generate_signing_key(), ATTORNEY, "approver")
    return decode_registry(encode_registry((entry,), (), (device.record(ATTORNEY),)))


def show() -> bytes:
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id="sha256:" + "a" * 64,
        resolver_id=ATTORNEY,
        requested_at_ms=1,
    )
    return canonical_bytes(msgspec.to_builtins(request))


def read(issued_at_ms: int, expires_at_ms: int, now_ms: int) -> str:
    """``ok``, or the reason a read signed under a grant of these times is refused."""
    device, session_key = SoftAuthenticator(), generate_signing_key()
    payload = grant_payload(
        ATTORNEY, session_key, issued_at_ms=issued_at_ms, expires_at_ms=expires_at_ms
    )
    grant = device.sign("application/vnd.smf.session-grant+json;v=1", payload)
    data = delegated_request(grant, session_key, names.PAYLOAD_SHOW_REQUEST, show())
    try:
        open_request(
            data,
            registry_of(device),
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="m",
            person="request",
            now_ms=now_ms,
        )
    except StageRefusal as refusal:
        return refusal.reason_code
    return "ok"


def test_a_grant_lasts_twelve_hours_at_most() -> None:
    assert read(NOW, NOW + 1, NOW) == "ok"  # a millisecond is a time
    assert read(NOW, NOW + HOURS_12, NOW) == "ok"
    assert read(NOW, NOW + HOURS_12 + 1, NOW) == "session_grant_expired"


def test_a_grant_is_good_from_a_minute_before_its_issue_until_its_end() -> None:
    assert read(NOW + MINUTE, NOW + HOURS_12, NOW) == "ok"
    assert read(NOW + MINUTE + 1, NOW + HOURS_12, NOW) == "session_grant_expired"
    assert read(NOW, NOW + 1000, NOW + 999) == "ok"
    assert read(NOW, NOW + 1000, NOW + 1000) == "session_grant_expired"


def padded(size: int) -> bytes:
    """A request that says it is passkey-signed, ``size`` bytes long."""
    head = b'{"schema":"smf.passkey-signed/1"}'
    return head + b" " * (size - len(head))


def test_a_passkey_signed_request_is_64_kib_at_most() -> None:
    assert is_passkey_signed(padded(KIB_64))
    assert not is_passkey_signed(padded(KIB_64 + 1))
    with pytest.raises(dsse.MalformedEnvelopeError) as at_bound:
        open_passkey_signed(padded(KIB_64), {}, names.PAYLOAD_SHOW_REQUEST)
    assert not isinstance(at_bound.value, dsse.EnvelopeTooLargeError)
    with pytest.raises(dsse.EnvelopeTooLargeError):
        open_passkey_signed(padded(KIB_64 + 1), {}, names.PAYLOAD_SHOW_REQUEST)


def record_with(**changes: Any) -> bytes:
    fields = msgspec.to_builtins(SoftAuthenticator().record(ATTORNEY)) | changes
    return json.dumps(fields).encode()


def decodes(data: bytes, kind: type[Any] = PasskeyRecord) -> bool:
    try:
        msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError:
        return False
    return True


def test_a_record_names_one_to_eight_origins_of_at_least_one_character() -> None:
    origin = "https://localhost"
    assert decodes(record_with(origins=[origin] * 8))
    assert not decodes(record_with(origins=[origin] * 9))
    assert not decodes(record_with(origins=[]))
    assert decodes(record_with(origins=["a"]))  # one character: the record's check refuses it
    assert not decodes(record_with(origins=[""]))


def test_a_credential_id_is_16_to_1366_characters() -> None:
    for size, fits in ((15, False), (16, True), (1366, True), (1367, False)):
        assert decodes(record_with(credential_id="A" * size)) is fits, size


def test_a_key_or_an_assertions_part_is_8192_characters_at_most() -> None:
    assert decodes(record_with(public_key="A" * 8192))
    assert not decodes(record_with(public_key="A" * 8193))
    parts = {"clientDataJSON": "A", "authenticatorData": "A", "signature": "A" * 8192}
    assert decodes(json.dumps(parts).encode(), AssertionResponse)
    parts["signature"] += "A"
    assert not decodes(json.dumps(parts).encode(), AssertionResponse)


# -- the shapes: what does not decode is refused before any check ----------------------


def a_grant() -> dict[str, Any]:
    payload = grant_payload(ATTORNEY, generate_signing_key(), issued_at_ms=0, expires_at_ms=1)
    grant: dict[str, Any] = json.loads(payload)
    return grant


def test_every_passkey_struct_refuses_a_field_it_does_not_know() -> None:
    assert not decodes(record_with(unexpected=1))
    parts = {"clientDataJSON": "A", "authenticatorData": "A", "signature": "A", "x": "A"}
    assert not decodes(json.dumps(parts).encode(), AssertionResponse)
    assertion = msgspec.to_builtins(SoftAuthenticator().assertion(b"c")) | {"x": 1}
    assert not decodes(json.dumps(assertion).encode(), PasskeyAssertion)
    signed = json.loads(SoftAuthenticator().sign(names.PAYLOAD_SHOW_REQUEST, show()))
    assert not decodes(json.dumps(signed | {"x": 1}).encode(), PasskeySigned)
    grant = json.loads(
        grant_payload(ATTORNEY, generate_signing_key(), issued_at_ms=0, expires_at_ms=1)
    )
    assert not decodes(json.dumps(grant | {"x": 1}).encode(), SessionGrant)
    session_key = generate_signing_key()
    delegated = json.loads(
        delegated_request(
            SoftAuthenticator().sign(names.PAYLOAD_SHOW_REQUEST, show()),
            session_key,
            names.PAYLOAD_SHOW_REQUEST,
            show(),
        )
    )
    assert decodes(json.dumps(delegated).encode(), PasskeyDelegated)
    assert not decodes(json.dumps(delegated | {"x": 1}).encode(), PasskeyDelegated)


def test_a_record_and_a_response_leave_out_what_they_do_not_have() -> None:
    """A registry without labels, and an assertion without a user handle, keep the bytes
    they had before these optional fields existed."""
    record = SoftAuthenticator().record(ATTORNEY)
    assert b"label" not in msgspec.json.encode(record)
    response = AssertionResponse(client_data_json="A", authenticator_data="A", signature="A")
    assert b"userHandle" not in msgspec.json.encode(response)


def test_a_label_a_principal_and_an_origin_have_their_lengths() -> None:
    assert decodes(record_with(label="x" * 64))
    assert not decodes(record_with(label="x" * 65))
    for size, fits in ((0, False), (1, True), (256, True), (257, False)):
        assert decodes(record_with(principal="p" * size)) is fits, size
    assert decodes(record_with(origins=["o" * 256]))
    assert not decodes(record_with(origins=["o" * 257]))


def test_a_payload_type_and_a_session_key_have_their_lengths() -> None:
    signed = json.loads(SoftAuthenticator().sign(names.PAYLOAD_SHOW_REQUEST, show()))
    for size, fits in ((0, False), (1, True), (256, True), (257, False)):
        shaped = json.dumps(signed | {"payloadType": "t" * size}).encode()
        assert decodes(shaped, PasskeySigned) is fits, size
    grant = json.loads(
        grant_payload(ATTORNEY, generate_signing_key(), issued_at_ms=0, expires_at_ms=1)
    )
    for size, fits in ((43, False), (44, True), (45, False)):
        shaped = json.dumps(grant | {"session_key": "A" * size}).encode()
        assert decodes(shaped, SessionGrant) is fits, size


def test_only_the_two_passkey_schemas_are_read_as_passkey_requests() -> None:
    assert passkey_kind(b'{"schema":"smf.passkey-signed/1"}') == "smf.passkey-signed/1"
    assert passkey_kind(b'{"schema":"smf.passkey-delegated/1"}') == "smf.passkey-delegated/1"
    assert passkey_kind(b'{"schema":"smf.other/1"}') is None


@pytest.mark.parametrize(
    ("origin", "words"),
    [
        ("https://", "names no host"),
        ("ftp://localhost", "neither https nor localhost"),
        ("http://localhost.evil.example", "neither https nor localhost"),
    ],
)
def test_an_origin_names_a_host_a_browser_trusts(origin: str, words: str) -> None:
    with pytest.raises(PasskeyRecordError, match=words):
        check_origin(origin, "localhost")


def test_the_fingerprint_is_the_first_64_bits_of_the_credential_ids_sha256() -> None:
    raw = bytes(range(32))
    digest = hashlib.sha256(raw).hexdigest()
    expected = f"{digest[0:4]}-{digest[4:8]}-{digest[8:12]}-{digest[12:16]}"
    assert credential_fingerprint(b64url(raw)) == expected
