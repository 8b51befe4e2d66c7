"""Passkeys: a person's WebAuthn credential as a second way to sign a person's request.

ARCHITECTURE.md, "Trust and identity on the bus"; docs/SUBJECTS.md, "Passkey-signed
requests". An attorney who signs with a passkey (a platform authenticator or a
security key) holds no key file. What keeps that as strong as a signed envelope:

- **Enrolment is the operator's.** A credential counts only when a
  :class:`PasskeyRecord` in the registry names it. The registry reaches the gate
  inside a release the operator's release keys signed, so the binding of a credential
  to a principal is operator-signed; the record fixes the relying party id and the
  origins the credential may be used from, and the credential's public key.
- **The assertion signs the exact request.** The WebAuthn challenge is
  :func:`challenge_for`: SHA-256 of the DSSE pre-authentication encoding of the
  payload type and payload bytes, the very bytes an Ed25519 signer signs. A changed
  binding digest, decision, approval id or time is another challenge, and the
  authenticator's signature over it does not verify; a request signed for one
  purpose cannot be replayed as another.
- **User verification is required.** An assertion whose authenticator did not verify
  the user (PIN, biometric) is refused with its own code, as is one without user
  presence, one from another origin or relying party, and one by a credential no
  record names.

What it does not do: keep the authenticator's signature counter. Synced passkeys
report zero, so a counter proves nothing for them, and the gate replicas would
have to share it; a replay is stopped where the request is used instead (an approval
is resolved once; a show, track or re-request is fresh for a minute, as a signed
envelope is).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec

from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import PUBLIC_KEY_BYTES, VerifyKey
from smf_assurance.subjects.patterns import Millis

PASSKEY_SIGNED_SCHEMA: Final = "smf.passkey-signed/1"
PAYLOAD_PASSKEY_ENROLMENT: Final = "application/vnd.smf.passkey-enrolment+json;v=1"
"""What a registration's challenge covers (:func:`enrolment_challenge`)."""
PAYLOAD_SESSION_GRANT: Final = "application/vnd.smf.session-grant+json;v=1"
"""A passkey's grant of a sign-in's session key (:class:`SessionGrant`)."""
PASSKEY_DELEGATED_SCHEMA: Final = "smf.passkey-delegated/1"
MAX_GRANT_MS: Final = 12 * 3600 * 1000
"""The longest a session key may act for its person: a working day, as a console
session (8 h by default) is shorter."""
GRANT_SKEW_MS: Final = 60_000
"""How far before its issue time a grant is already good (clocks drift)."""
MAX_PASSKEY_SIGNED_BYTES: Final = 64 * 1024
"""A person's request is small; the bound is checked before any parsing."""
MAX_ORIGINS: Final = 8
B64URL: Final = r"^[A-Za-z0-9_-]*\Z"
CredentialId = Annotated[str, msgspec.Meta(pattern=B64URL, min_length=16, max_length=1366)]
"""A credential id, base64url without padding: 16 to 1023 bytes (WebAuthn level 3,
"credential ID")."""
B64Url = Annotated[str, msgspec.Meta(pattern=B64URL, max_length=8192)]
Origin = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
RpId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9.-]{1,253}\Z")]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class PasskeyError(dsse.SignatureError):
    """An assertion that does not verify: a changed request (another challenge), a
    signature by another key, another origin or relying party, no user presence."""

    reason_code: ClassVar[str] = "bad_passkey_assertion"


class UnenrolledPasskeyError(PasskeyError):
    """No registry record names the credential: an attorney's own passkey that the
    operator never enrolled, a removed one, or an outsider's."""

    reason_code: ClassVar[str] = "unknown_passkey"


class UserNotVerifiedError(PasskeyError):
    """The authenticator did not verify the user (no PIN, no biometric): anyone holding
    the device could have touched it."""

    reason_code: ClassVar[str] = "passkey_user_not_verified"


class GrantExpiredError(PasskeyError):
    """A session key's grant is outside its time (or longer than :data:`MAX_GRANT_MS`):
    a sign-in that ended cannot sign again."""

    reason_code: ClassVar[str] = "session_grant_expired"


class GrantMismatchError(PasskeyError):
    """A grant that names another principal than the enrolled credential that signed it."""

    reason_code: ClassVar[str] = "session_grant_mismatch"


class PasskeyRecordError(ValueError):
    """A registry record that cannot name a usable credential."""


class PasskeyRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One enrolled credential of a person on the roster (``RegistryFile.passkeys``)."""

    principal: Name
    credential_id: CredentialId
    public_key: B64Url
    """The credential's COSE public key, base64url, as its registration gave it."""
    rp_id: RpId
    origins: Annotated[tuple[Origin, ...], msgspec.Meta(min_length=1, max_length=MAX_ORIGINS)]
    enrolled_at_ms: Millis
    label: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class AssertionResponse(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    rename={
        "client_data_json": "clientDataJSON",
        "authenticator_data": "authenticatorData",
        "user_handle": "userHandle",
    },
):
    """``AuthenticatorAssertionResponse`` in its JSON form (WebAuthn level 3,
    ``AuthenticatorAssertionResponseJSON``)."""

    client_data_json: B64Url
    authenticator_data: B64Url
    signature: B64Url
    user_handle: B64Url | None = None


class PasskeyAssertion(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename={"raw_id": "rawId"}
):
    """The assertion a browser's ``navigator.credentials.get`` returned, in its JSON form."""

    id: CredentialId
    raw_id: CredentialId
    type: Literal["public-key"]
    response: AssertionResponse


class PasskeySigned(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    rename={"payload_type": "payloadType"},
):
    """A request signed by a passkey: the payload as a DSSE envelope carries it
    (standard base64, canonical), and the assertion over :func:`challenge_for` it."""

    schema: Literal["smf.passkey-signed/1"]
    payload_type: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    payload: str
    assertion: PasskeyAssertion


class SessionGrant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A person's passkey grants a session key the right to sign their reads.

    Signed once, at sign-in, with an assertion (payload type
    :data:`PAYLOAD_SESSION_GRANT`), so that showing a filing or asking where one's
    requests stand does not ask the person to touch their authenticator each time. The
    key is made in the person's browser and never leaves it (WebCrypto, not
    extractable). ``nonce`` is the console's single-use sign-in challenge. A grant
    never signs a resolution: allow-once and deny are each their own assertion.
    """

    schema: Literal["smf.session-grant/1"]
    principal: Name
    session_key: Annotated[str, msgspec.Meta(min_length=44, max_length=44)]
    """The session key's Ed25519 public key, standard base64 (32 bytes)."""
    nonce: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{43}\Z")]
    issued_at_ms: Millis
    expires_at_ms: Millis


class PasskeyDelegated(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A request signed by a session key (a DSSE envelope), with the passkey-signed
    grant that lets the key sign for its person."""

    schema: Literal["smf.passkey-delegated/1"]
    grant: PasskeySigned
    envelope: dsse.Envelope


class _Schema(msgspec.Struct, frozen=True):
    schema: str | None = None


@dataclass(frozen=True, slots=True)
class PasskeyVerified:
    """What an assertion proved: these bytes, of this type, signed with this
    enrolled credential of ``principal``."""

    verified: dsse.Verified
    principal: str
    credential_id: str


def challenge_for(payload_type: str, payload: bytes) -> bytes:
    """The WebAuthn challenge that signs ``payload`` of ``payload_type``: SHA-256 of
    the DSSE pre-authentication encoding, so type and bytes are both authenticated."""
    return hashlib.sha256(dsse.pae(payload_type, payload)).digest()


def passkey_kind(data: bytes) -> str | None:
    """Which passkey form ``data`` says it is (:data:`PASSKEY_SIGNED_SCHEMA` or
    :data:`PASSKEY_DELEGATED_SCHEMA`), or None: a DSSE envelope has no ``schema``, and
    anything that does not decode is left to the envelope's decoder."""
    if len(data) > MAX_PASSKEY_SIGNED_BYTES:
        return None
    try:
        schema = msgspec.json.decode(data, type=_Schema).schema
    except (msgspec.DecodeError, RecursionError):
        return None
    return schema if schema in (PASSKEY_SIGNED_SCHEMA, PASSKEY_DELEGATED_SCHEMA) else None


def is_passkey_signed(data: bytes) -> bool:
    """Whether ``data`` says it is a request signed by a passkey's own assertion."""
    return passkey_kind(data) == PASSKEY_SIGNED_SCHEMA


def b64url_decode(text: str, what: str) -> bytes:
    """Base64url without padding, in its one spelling (WebAuthn's encoding)."""
    return dsse.b64decode(text + "=" * (-len(text) % 4), what)


def check_record(record: PasskeyRecord) -> None:
    """A record whose relying party and origins fit together; raises
    :class:`PasskeyRecordError`.

    The credential id must decode (no assertion could name one that does not). The
    relying party id must be a domain, never an address (WebAuthn level 3,
    "RP ID"), and each origin's host that domain or under it; an origin is
    ``https``, or ``http`` on ``localhost`` only (a browser's secure contexts).
    Standard library only, so that every reader of a registry (a runtime's adapter
    among them) can check it without the WebAuthn verifier; the public key is
    checked by :func:`record_from_registration` when it is enrolled, and a key
    that does not decode verifies no assertion.
    """
    try:
        b64url_decode(record.credential_id, "credential_id")
    except dsse.MalformedEnvelopeError as exc:
        raise PasskeyRecordError(f"passkey {record.credential_id!r}: not base64url") from exc
    try:
        ipaddress.ip_address(record.rp_id)
    except ValueError:
        pass  # not an address: a domain, as it must be
    else:
        raise PasskeyRecordError(f"passkey rp_id {record.rp_id!r} is an address, not a domain")
    for origin in record.origins:
        check_origin(origin, record.rp_id)


def enrolment_challenge(principal: str, rp_id: str) -> bytes:
    """The challenge a person's ``navigator.credentials.create`` uses to enrol: it names
    the principal and relying party, so a registration made for one person, or for
    another site, does not verify as this one's. It is no secret and proves no
    freshness: what makes an enrolment the person's is the operator's check, out of
    band, that the credential id the person's browser showed is the one enrolled."""
    body = canonical_bytes({"principal": principal, "rp_id": rp_id})
    return challenge_for(PAYLOAD_PASSKEY_ENROLMENT, body)


def record_from_registration(
    registration: bytes,
    *,
    principal: str,
    rp_id: str,
    origins: tuple[str, ...],
    enrolled_at_ms: int,
    label: str | None = None,
) -> PasskeyRecord:
    """The registry record for a registration (``RegistrationResponseJSON``, what the
    person's browser returned from ``navigator.credentials.create`` with
    :func:`enrolment_challenge`); raises :class:`PasskeyRecordError`.

    The maintained verifier checks the challenge, an origin among ``origins``, the
    relying party, presence and user verification (required: a credential that does
    not verify its user is not enrolled) and the attestation statement's format.
    """
    from webauthn import verify_registration_response  # noqa: PLC0415 - a heavy import
    from webauthn.helpers.exceptions import InvalidRegistrationResponse  # noqa: PLC0415

    try:
        verified = verify_registration_response(
            credential=registration.decode("utf-8"),
            expected_challenge=enrolment_challenge(principal, rp_id),
            expected_rp_id=rp_id,
            expected_origin=list(origins),
            require_user_verification=True,
        )
    except InvalidRegistrationResponse as exc:
        raise PasskeyRecordError(f"the registration does not verify: {exc}") from exc
    except Exception as exc:  # the parser raises many kinds for a file that is not one
        raise PasskeyRecordError(f"not a registration ({type(exc).__name__})") from exc
    try:
        record = PasskeyRecord(
            principal=principal,
            credential_id=_b64url(verified.credential_id),
            public_key=_b64url(verified.credential_public_key),
            rp_id=rp_id,
            origins=origins,
            enrolled_at_ms=enrolled_at_ms,
            label=label,
        )
        record = msgspec.convert(msgspec.to_builtins(record), PasskeyRecord)
    except msgspec.ValidationError as exc:
        raise PasskeyRecordError(f"the registration cannot be enrolled: {exc}") from exc
    check_record(record)
    return record


def _b64url(raw: bytes) -> str:
    return dsse.b64encode(raw).translate(_STANDARD_TO_URL_SAFE).rstrip("=")


_STANDARD_TO_URL_SAFE: Final = str.maketrans("+/", "-_")


def check_origin(origin: str, rp_id: str) -> None:
    """``origin`` is ``scheme://host[:port]`` with no path, whose host is ``rp_id``
    or under it, and which a browser treats as a secure context."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError as exc:
        raise PasskeyRecordError(f"passkey origin {origin!r} is not an origin") from exc
    host = parts.hostname
    if host is None:
        raise PasskeyRecordError(f"passkey origin {origin!r} names no host")
    rebuilt = f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")
    if rebuilt != origin:
        raise PasskeyRecordError(f"passkey origin {origin!r} is not scheme://host[:port]")
    if parts.scheme != "https" and not (parts.scheme == "http" and host == "localhost"):
        raise PasskeyRecordError(f"passkey origin {origin!r} is neither https nor localhost")
    if host != rp_id and not host.endswith("." + rp_id):
        raise PasskeyRecordError(f"passkey origin {origin!r} is not within rp_id {rp_id!r}")


def open_passkey_signed(
    data: bytes, records: Mapping[str, tuple[PasskeyRecord, str]], expected_payload_type: str
) -> PasskeyVerified:
    """Verify a passkey-signed request against the enrolled ``records`` (credential id
    to its record and principal); raises a :class:`dsse.SignatureError`.

    In the order of ``dsse.verify``: decode, find the credential, verify the
    assertion over the challenge the payload gives, then check the payload type.
    """
    return _open_signed(_decoded(data, PasskeySigned), records, expected_payload_type)


PasskeyWire = TypeVar("PasskeyWire", PasskeySigned, PasskeyDelegated)


def decode_passkey_signed(data: bytes) -> PasskeySigned:
    """A passkey-signed request's wire form, bounded and decoded, not yet verified."""
    return _decoded(data, PasskeySigned)


def credential_fingerprint(credential_id: str) -> str:
    """What a person and the operator read to each other to be sure the credential
    enrolled is the one the person's browser made: the first 64 bits of SHA-256 of the
    credential id's bytes, as four groups of four hex digits. The console's enrolment
    page shows the same (``app.js``, ``credentialFingerprint``)."""
    digest = hashlib.sha256(b64url_decode(credential_id, "credential_id")).hexdigest()
    return "-".join(digest[start : start + 4] for start in (0, 4, 8, 12))


def _decoded(data: bytes, kind: type[PasskeyWire]) -> PasskeyWire:
    if len(data) > MAX_PASSKEY_SIGNED_BYTES:
        raise dsse.EnvelopeTooLargeError(
            f"request is {len(data)} bytes, more than {MAX_PASSKEY_SIGNED_BYTES}"
        )
    try:
        return msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise dsse.MalformedEnvelopeError(f"not a {kind.__name__} request") from exc


def _open_signed(
    signed: PasskeySigned,
    records: Mapping[str, tuple[PasskeyRecord, str]],
    expected_payload_type: str,
) -> PasskeyVerified:
    assertion = signed.assertion
    if assertion.id != assertion.raw_id:
        raise dsse.MalformedEnvelopeError("assertion id and rawId differ")
    payload = dsse.b64decode(signed.payload, "payload")
    enrolled = records.get(assertion.raw_id)
    if enrolled is None:
        raise UnenrolledPasskeyError("no enrolled passkey has this credential id")
    record, principal = enrolled
    _verify_assertion(assertion, record, challenge_for(signed.payload_type, payload))
    if signed.payload_type != expected_payload_type:
        raise dsse.PayloadTypeMismatchError(
            f"payloadType {signed.payload_type!r}, expected {expected_payload_type!r}"
        )
    verified = dsse.Verified(payload_type=signed.payload_type, payload=payload, key_ids=frozenset())
    return PasskeyVerified(verified, principal, record.credential_id)


def open_grant(
    signed: PasskeySigned, records: Mapping[str, tuple[PasskeyRecord, str]], now_ms: int
) -> tuple[SessionGrant, str]:
    """A session key's grant, verified: signed by an enrolled passkey of the principal
    it names, in its time; the grant and the principal. Raises a SignatureError."""
    opened = _open_signed(signed, records, PAYLOAD_SESSION_GRANT)
    grant = dsse.decode_verified(opened.verified, SessionGrant)
    if grant.principal != opened.principal:
        raise GrantMismatchError("the grant names another principal than its passkey's")
    lifetime = grant.expires_at_ms - grant.issued_at_ms
    if not 0 < lifetime <= MAX_GRANT_MS:
        raise GrantExpiredError(f"a grant is good for at most {MAX_GRANT_MS} ms")
    if not grant.issued_at_ms - GRANT_SKEW_MS <= now_ms < grant.expires_at_ms:
        raise GrantExpiredError("the grant is not in its time")
    return grant, opened.principal


def open_delegated(
    data: bytes,
    records: Mapping[str, tuple[PasskeyRecord, str]],
    expected_payload_type: str,
    now_ms: int,
) -> PasskeyVerified:
    """Verify a request signed by a session key under its passkey's grant
    (:class:`PasskeyDelegated`): the grant first (:func:`open_grant`), then the
    envelope against the one key the grant names, for ``expected_payload_type``."""
    delegated = _decoded(data, PasskeyDelegated)
    grant, principal = open_grant(delegated.grant, records, now_ms)
    raw_key = dsse.b64decode(grant.session_key, "session_key")
    if len(raw_key) != PUBLIC_KEY_BYTES:
        raise dsse.MalformedPayloadError(f"the session key is {len(raw_key)} bytes")
    session_key = VerifyKey(raw_key)
    verified = dsse.verify(
        delegated.envelope, {session_key.key_id: session_key}, 1, expected_payload_type
    )
    return PasskeyVerified(verified, principal, delegated.grant.assertion.raw_id)


def _verify_assertion(assertion: PasskeyAssertion, record: PasskeyRecord, challenge: bytes) -> None:
    """The maintained verifier (``webauthn``, Duo Labs) checks type, challenge, origin,
    relying party, presence and signature; user verification is checked first, here,
    so its absence has its own code."""
    from webauthn import verify_authentication_response  # noqa: PLC0415 - a heavy import
    from webauthn.helpers import parse_authenticator_data  # noqa: PLC0415
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse  # noqa: PLC0415
    from webauthn.helpers.structs import (  # noqa: PLC0415
        AuthenticationCredential,
        AuthenticatorAssertionResponse,
    )

    response = assertion.response
    authenticator_data = b64url_decode(response.authenticator_data, "authenticatorData")
    try:
        flags = parse_authenticator_data(authenticator_data).flags
    except Exception as exc:  # the parser raises many kinds for bad bytes
        raise PasskeyError("authenticatorData does not decode") from exc
    if not flags.uv:
        raise UserNotVerifiedError("the authenticator did not verify the user")
    credential = AuthenticationCredential(
        id=assertion.id,
        raw_id=b64url_decode(assertion.raw_id, "rawId"),
        response=AuthenticatorAssertionResponse(
            client_data_json=b64url_decode(response.client_data_json, "clientDataJSON"),
            authenticator_data=authenticator_data,
            signature=b64url_decode(response.signature, "signature"),
        ),
    )
    try:
        verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=record.rp_id,
            expected_origin=list(record.origins),
            credential_public_key=b64url_decode(record.public_key, "public_key"),
            credential_current_sign_count=0,
            require_user_verification=True,
        )
    except InvalidAuthenticationResponse as exc:
        raise PasskeyError(str(exc)) from exc
    except Exception as exc:  # a malformed key or signature raises others
        raise PasskeyError(type(exc).__name__) from exc


def signed_request(payload_type: str, payload: bytes, assertion: PasskeyAssertion) -> bytes:
    """The wire bytes of a passkey-signed request (the console's page builds the same)."""
    return msgspec.json.encode(
        PasskeySigned(
            schema=PASSKEY_SIGNED_SCHEMA,
            payload_type=payload_type,
            payload=dsse.b64encode(payload),
            assertion=assertion,
        )
    )
