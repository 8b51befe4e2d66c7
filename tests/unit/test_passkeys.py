"""Passkey records, enrolment and assertions (``smf_assurance.subjects.passkeys``), in process.

The device is ``tests.support.authenticator.SoftAuthenticator``: a real P-256 key and the
WebAuthn byte formats. What these tests prove: a registry names a credential only for a
person on the roster, once, with a key that decodes, a relying party that is a domain and
origins within it that a browser treats as secure; an enrolment verifies only for the
principal, relying party and origin its challenge and client data name, with the user
verified; an assertion verifies only over the exact payload type and bytes, from an
enrolled credential, with the user verified and present, on an enrolled origin; anything
malformed is refused as malformed before any signature check. The gate's handling of the
same refusals, end to end: ``tests/bus/test_passkey_approvals.py``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from smf_assurance.pipeline.desks.signed import PersonRequest, open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import ShowRequest
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import SigningKey, generate_signing_key
from smf_assurance.subjects.passkeys import (
    MAX_GRANT_MS,
    MAX_PASSKEY_SIGNED_BYTES,
    PAYLOAD_SESSION_GRANT,
    PasskeyRecord,
    PasskeyRecordError,
    check_origin,
    enrolment_challenge,
    is_passkey_signed,
    open_passkey_signed,
    passkey_kind,
    record_from_registration,
)
from smf_assurance.subjects.registry import (
    KeyRegistry,
    RegistryError,
    decode_registry,
    encode_registry,
    entry_for,
)
from tests.support.authenticator import SoftAuthenticator, delegated_request, grant_payload

pytestmark = pytest.mark.claim("approver-desk.passkey-signed-resolution")

ATTORNEY = "attorney-alex"
ORIGIN = "http://localhost:8765"


def registry_with(*records: PasskeyRecord, role: Any = "approver") -> KeyRegistry:
    entry = entry_for(generate_signing_key(), ATTORNEY, role, tenants=("t",))
    return decode_registry(encode_registry((entry,), (), records))


def show_payload(resolver: str = ATTORNEY) -> bytes:
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id="sha256:" + "a" * 64,
        resolver_id=resolver,
        requested_at_ms=1,
    )
    return canonical_bytes(msgspec.to_builtins(request))


def refusal(
    data: bytes, registry: KeyRegistry, person: PersonRequest = "decision", now_ms: int = 0
) -> str:
    """The reason ``open_request`` refuses ``data`` as a show request of a person's."""
    with pytest.raises(StageRefusal) as caught:
        open_request(
            data,
            registry,
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="m",
            person=person,
            now_ms=now_ms,
        )
    return caught.value.reason_code


# -- the registry ---------------------------------------------------------------


def test_an_enrolled_passkey_signs_for_its_principal() -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))

    request, signers = open_request(
        device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload()),
        registry,
        ShowRequest,
        names.PAYLOAD_SHOW_REQUEST,
        malformed="m",
        person="decision",
    )

    assert request.resolver_id == ATTORNEY
    assert [p.name for p in signers] == [ATTORNEY]
    assert registry.passkeys[device.id][1] == ATTORNEY


def test_a_passkey_of_someone_not_on_the_roster_as_a_person_refuses_the_registry() -> None:
    with pytest.raises(RegistryError, match="not an approver"):
        registry_with(SoftAuthenticator().record("nobody"))
    with pytest.raises(RegistryError, match="not an approver"):
        registry_with(SoftAuthenticator().record(ATTORNEY), role="operator")


def test_one_credential_enrolled_twice_refuses_the_registry() -> None:
    record = SoftAuthenticator().record(ATTORNEY)
    with pytest.raises(RegistryError, match="enrolled twice"):
        registry_with(record, record)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"rp_id": "127.0.0.1", "origins": ("https://127.0.0.1",)},
            "an address",
            id="ip-rp-id",
        ),
        pytest.param({"credential_id": "A" * 17}, "not base64url", id="id-not-base64url"),
        pytest.param({"origins": ("http://example.com",)}, "neither https", id="plain-http"),
        pytest.param({"origins": ("https://evil.example",)}, "not within", id="other-site"),
        pytest.param({"origins": ("https://localhost/path",)}, "scheme://host", id="a-path"),
        pytest.param({"origins": ("https://localhost:99999",)}, "not an origin", id="bad-port"),
    ],
)
def test_a_record_that_cannot_name_a_usable_credential_refuses_the_registry(
    change: dict[str, Any], message: str
) -> None:
    record = msgspec.structs.replace(SoftAuthenticator().record(ATTORNEY), **change)
    with pytest.raises(RegistryError, match=message):
        registry_with(record)


def test_a_subdomain_origin_and_https_fit_a_relying_party() -> None:
    check_origin("https://console.firm.example", "firm.example")
    check_origin("https://firm.example:8443", "firm.example")
    check_origin("http://localhost:8765", "localhost")
    with pytest.raises(PasskeyRecordError):
        check_origin("https://notfirm.example", "firm.example")


def test_a_registry_without_passkeys_reads_as_before() -> None:
    entry = entry_for(generate_signing_key(), ATTORNEY, "approver")
    assert b"passkeys" not in encode_registry((entry,))
    assert decode_registry(encode_registry((entry,))).passkeys == {}


# -- enrolment ------------------------------------------------------------------


def enrol(registration: dict[str, Any], **changes: Any) -> PasskeyRecord:
    arguments: dict[str, Any] = {
        "principal": ATTORNEY,
        "rp_id": "localhost",
        "origins": (ORIGIN,),
        "enrolled_at_ms": 7,
        "label": "security key",
    } | changes
    return record_from_registration(json.dumps(registration).encode(), **arguments)


def test_a_registration_for_the_principal_enrols_its_credential() -> None:
    device = SoftAuthenticator()
    record = enrol(device.register(enrolment_challenge(ATTORNEY, "localhost")))
    expected = msgspec.structs.replace(
        device.record(ATTORNEY, enrolled_at_ms=7), label="security key"
    )
    assert record == expected
    assert registry_with(record).passkeys[device.id] == (record, ATTORNEY)


@pytest.mark.parametrize(
    ("made_for", "options", "message"),
    [
        pytest.param(("paralegal-pat", "localhost"), {}, "challenge", id="another-person"),
        pytest.param((ATTORNEY, "evil.example"), {}, "challenge", id="another-rp"),
        pytest.param(
            (ATTORNEY, "localhost"), {"origin": "http://localhost:1"}, "origin", id="other-origin"
        ),
        pytest.param(
            (ATTORNEY, "localhost"), {"user_verified": False}, "verif", id="no-user-verification"
        ),
    ],
)
def test_a_registration_made_for_anything_else_is_not_enrolled(
    made_for: tuple[str, str], options: dict[str, Any], message: str
) -> None:
    registration = SoftAuthenticator().register(enrolment_challenge(*made_for), **options)
    with pytest.raises(PasskeyRecordError, match=message):
        enrol(registration)


def test_a_file_that_is_no_registration_is_not_enrolled() -> None:
    with pytest.raises(PasskeyRecordError, match="not a registration"):
        record_from_registration(
            b"{}", principal=ATTORNEY, rp_id="localhost", origins=(ORIGIN,), enrolled_at_ms=0
        )


def test_an_enrolment_that_cannot_be_a_record_is_refused() -> None:
    registration = SoftAuthenticator().register(enrolment_challenge(ATTORNEY, "localhost"))
    with pytest.raises(PasskeyRecordError, match="cannot be enrolled"):
        enrol(registration, label="x" * 65)
    with pytest.raises(PasskeyRecordError, match="neither https"):
        enrol(registration, rp_id="localhost", origins=(ORIGIN, "http://host.localhost"))


# -- assertions -----------------------------------------------------------------


def test_an_assertion_is_checked_before_the_payload_type() -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    signed = device.sign(names.PAYLOAD_RESOLUTION, show_payload())
    assert refusal(signed, registry) == "wrong_payload_type"
    stranger = SoftAuthenticator().sign(names.PAYLOAD_RESOLUTION, show_payload())
    assert refusal(stranger, registry) == "unknown_passkey"


def test_the_payload_type_is_signed_with_the_payload() -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    wire = json.loads(device.sign(names.PAYLOAD_RESOLUTION, show_payload()))
    wire["payloadType"] = names.PAYLOAD_SHOW_REQUEST
    assert refusal(json.dumps(wire).encode(), registry) == "bad_passkey_assertion"


def wire_with(device: SoftAuthenticator, **changes: Any) -> bytes:
    wire = json.loads(device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload()))
    for path, value in changes.items():
        target = wire
        *parents, leaf = path.split("__")
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return json.dumps(wire).encode()


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"assertion__rawId": "A" * 43}, id="id-and-rawId-differ"),
        pytest.param({"payload": "not base64!"}, id="payload-not-base64"),
        pytest.param({"assertion__type": "password"}, id="not-public-key"),
        pytest.param({"unexpected": 1}, id="unknown-field"),
        pytest.param({"assertion__response__signature": "+/"}, id="signature-not-base64url"),
    ],
)
def test_a_malformed_passkey_request_is_refused_as_malformed(changes: dict[str, Any]) -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    assert refusal(wire_with(device, **changes), registry) == "m"


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"assertion__response__authenticatorData": "AAAA"}, id="short-auth-data"),
        pytest.param({"assertion__response__signature": "AAAA"}, id="not-a-der-signature"),
        pytest.param({"assertion__response__clientDataJSON": "e30"}, id="empty-client-data"),
    ],
)
def test_a_broken_assertion_is_refused_as_a_bad_assertion(changes: dict[str, Any]) -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    assert refusal(wire_with(device, **changes), registry) == "bad_passkey_assertion"


def test_an_oversized_request_is_refused_before_parsing() -> None:
    data = b" " * (MAX_PASSKEY_SIGNED_BYTES + 1)
    assert not is_passkey_signed(data)
    with pytest.raises(dsse.EnvelopeTooLargeError):
        open_passkey_signed(data, {}, names.PAYLOAD_SHOW_REQUEST)
    with pytest.raises(dsse.MalformedEnvelopeError):
        open_passkey_signed(b"[]", {}, names.PAYLOAD_SHOW_REQUEST)


@pytest.mark.parametrize(
    "data", [b"", b"[", b'{"payloadType":"x"}', b'{"schema":"smf.other/1"}', b'{"schema":1}']
)
def test_only_a_request_that_says_it_is_passkey_signed_is_read_as_one(data: bytes) -> None:
    assert not is_passkey_signed(data)


def test_a_passkey_whose_principal_left_the_roster_signs_nothing() -> None:
    """A registry made without :meth:`KeyRegistry.from_file`'s checks (no reader makes
    one) still cannot let a passkey sign for a principal it does not hold."""
    device = SoftAuthenticator()
    registry = KeyRegistry({}, {}, {device.id: (device.record(ATTORNEY), ATTORNEY)})
    assert refusal(device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload()), registry) == (
        "unknown_passkey"
    )


def test_a_passkey_does_not_count_where_only_an_envelope_is_accepted() -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    with pytest.raises(StageRefusal) as caught:
        open_request(
            device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload()),
            registry,
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="m",
        )
    assert caught.value.reason_code == "m"


def test_an_assertion_without_user_verification_is_refused_with_its_own_code() -> None:
    device = SoftAuthenticator()
    registry = registry_with(device.record(ATTORNEY))
    signed = device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload(), user_verified=False)
    assert refusal(signed, registry) == "passkey_user_not_verified"


def test_a_key_the_verifier_cannot_use_refuses_every_assertion() -> None:
    """A record made without :func:`check_record` (no reader makes one) whose key does
    not decode: the assertion is refused, never an error escaping the gate."""
    device = SoftAuthenticator()
    broken = msgspec.structs.replace(device.record(ATTORNEY), public_key="AAAA")
    registry = KeyRegistry({}, {}, {device.id: (broken, ATTORNEY)})
    signed = device.sign(names.PAYLOAD_SHOW_REQUEST, show_payload())
    assert refusal(signed, registry) == "bad_passkey_assertion"


# -- a sign-in's session key ----------------------------------------------------------

NOW = 1_000_000_000


def session_signed(
    device: SoftAuthenticator,
    session_key: SigningKey,
    *,
    principal: str = ATTORNEY,
    issued_at_ms: int = NOW,
    expires_at_ms: int = NOW + 3_600_000,
    grant_type: str = PAYLOAD_SESSION_GRANT,
    payload_type: str = names.PAYLOAD_SHOW_REQUEST,
) -> bytes:
    payload = grant_payload(
        principal, session_key, issued_at_ms=issued_at_ms, expires_at_ms=expires_at_ms
    )
    grant = device.sign(grant_type, payload)
    return delegated_request(grant, session_key, payload_type, show_payload())


def read_refusal(data: bytes, registry: KeyRegistry, now_ms: int = NOW) -> str:
    return refusal(data, registry, "request", now_ms)


def test_a_session_key_granted_by_a_passkey_signs_the_persons_reads() -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))

    request, signers = open_request(
        session_signed(device, session_key),
        registry,
        ShowRequest,
        names.PAYLOAD_SHOW_REQUEST,
        malformed="m",
        person="request",
        now_ms=NOW + 1,
    )

    assert request.resolver_id == ATTORNEY
    assert [p.name for p in signers] == [ATTORNEY]
    assert device.sign_count == 1  # one touch for the sign-in, none for the read


def test_a_session_key_never_signs_a_decision() -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))
    assert refusal(session_signed(device, session_key), registry) == "m"


@pytest.mark.parametrize(
    ("grant", "now_ms"),
    [
        pytest.param({}, NOW + 3_600_000, id="ended"),
        pytest.param({}, NOW - 60_001, id="not-yet"),
        pytest.param({"expires_at_ms": NOW + MAX_GRANT_MS + 1}, NOW, id="longer-than-a-day"),
        pytest.param({"expires_at_ms": NOW}, NOW, id="no-time-at-all"),
    ],
)
def test_a_grant_outside_its_time_signs_nothing(grant: dict[str, Any], now_ms: int) -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))
    signed = session_signed(device, session_key, **grant)
    assert read_refusal(signed, registry, now_ms) == "session_grant_expired"


def test_a_grant_naming_another_person_signs_nothing() -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    other = msgspec.structs.replace(device.record(ATTORNEY), principal="paralegal-pat")
    entries = (
        entry_for(generate_signing_key(), ATTORNEY, "approver"),
        entry_for(generate_signing_key(), "paralegal-pat", "approver"),
    )
    registry = decode_registry(encode_registry(entries, (), (other,)))
    assert read_refusal(session_signed(device, session_key), registry) == "session_grant_mismatch"


def test_only_the_granted_key_signs_under_a_grant() -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))
    wire = json.loads(session_signed(device, session_key))
    forged = dsse.sign(names.PAYLOAD_SHOW_REQUEST, show_payload(), [generate_signing_key()])
    wire["envelope"] = msgspec.to_builtins(forged)
    assert read_refusal(json.dumps(wire).encode(), registry) == "unknown_signer"


def test_a_grant_is_its_own_kind_of_signature() -> None:
    """An assertion over anything but a grant (a resolution's bytes) grants no key, and
    a grant's key signs only the payload type it was asked for."""
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))
    not_a_grant = session_signed(device, session_key, grant_type=names.PAYLOAD_RESOLUTION)
    assert read_refusal(not_a_grant, registry) == "wrong_payload_type"
    other_type = session_signed(device, session_key, payload_type=names.PAYLOAD_TRACK_REQUEST)
    assert read_refusal(other_type, registry) == "wrong_payload_type"


def test_a_grant_whose_key_is_no_ed25519_key_is_malformed() -> None:
    device, session_key = SoftAuthenticator(), generate_signing_key()
    registry = registry_with(device.record(ATTORNEY))
    payload = json.loads(
        grant_payload(ATTORNEY, session_key, issued_at_ms=NOW, expires_at_ms=NOW + 1000)
    )
    payload["session_key"] = dsse.b64encode(bytes(31)).ljust(44, "=")
    grant = device.sign(PAYLOAD_SESSION_GRANT, canonical_bytes(payload))
    signed = delegated_request(grant, session_key, names.PAYLOAD_SHOW_REQUEST, show_payload())
    assert read_refusal(signed, registry) == "m"
    assert passkey_kind(signed) == "smf.passkey-delegated/1"
